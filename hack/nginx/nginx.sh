#!/bin/sh
# The cache image's nginx on this machine, for the tests that run nginx here: `make nginx`
# unpacks its Debian packages (images/cache/packages.txt) into root/ beside this script.
# It runs with the image's own loader and libraries, as the machine's libc may be older
# than they need. nginx keeps its process ID (exec), so signals reach it as usual.
root=$(dirname "$(readlink -f "$0")")/root
exec "$root/usr/lib64/ld-linux-x86-64.so.2" --library-path "$root/usr/lib/x86_64-linux-gnu" "$root/usr/sbin/nginx" "$@"
