/*
Copyright 2026 The edgepool Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Command filler is the e2e suite's disk hog: it writes -mib MiB to -file, one MiB at a
// time (at most -mibps a second, when given), syncing as it goes, then waits to be stopped. It stands for a pod whose emptyDir
// grows until the node runs short of disk.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	file := flag.String("file", "/data/fill", "the file to write")
	mib := flag.Int("mib", 100, "how many MiB to write")
	mibps := flag.Int("mibps", 0, "MiB written a second at most; 0: as fast as the disk takes them")
	flag.Parse()
	f, err := os.Create(*file)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i) // not zeros: the filesystem must store them
	}
	start := time.Now()
	for i := 0; i < *mib; i++ {
		if *mibps > 0 {
			time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(*mibps))))
		}
		if _, err := f.Write(chunk); err != nil {
			fmt.Fprintln(os.Stderr, err)
			break
		}
		if i%16 == 0 {
			_ = f.Sync()
		}
	}
	_ = f.Sync()
	fmt.Printf("wrote %d MiB to %s\n", *mib, *file)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
