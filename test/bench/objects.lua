-- wrk script: GET random objects /o/<first> .. /o/<first+count-1>, and print the
-- result as one JSON line for the edgepool benchmark. Arguments: first count seed
-- [file], where file lists the object numbers to choose from instead, one per line.
local first, count = 0, 1
local ids = nil
local tid, threads = 0, 0

function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

function init(args)
  first, count = tonumber(args[1]), tonumber(args[2])
  math.randomseed(tonumber(args[3]) * 1000 + tid)
  if args[4] then
    ids = {}
    for line in io.lines(args[4]) do ids[#ids + 1] = tonumber(line) end
  end
end

function request()
  local id
  if ids then
    id = ids[math.random(1, #ids)]
  else
    id = first + math.random(0, count - 1)
  end
  return wrk.format("GET", string.format("/o/%08d", id))
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'EDGEPOOL-WRK {"requests":%d,"bytes":%d,"seconds":%f,"errors":%d,' ..
    '"latency_mean_us":%f,"latency_stdev_us":%f,"latency_p50_us":%d,"latency_p90_us":%d,"latency_p99_us":%d,"latency_p999_us":%d,"latency_max_us":%d}\n',
    summary.requests, summary.bytes, summary.duration / 1e6,
    e.connect + e.read + e.write + e.status + e.timeout,
    latency.mean, latency.stdev, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), latency.max))
end
