-- wrk script for the reschedule phase: GET reschedule of the jobs "rs-<thread>-<i>" (i below
-- BENCH_JOBS, added beforehand), in turn to BENCH_DUE_MS plus an hour (later: one Redis write)
-- and minus an hour (earlier: a Redis write and a delay-topic message).
local due = tonumber(os.getenv("BENCH_DUE_MS"))
local jobs = tonumber(os.getenv("BENCH_JOBS"))
local threads = 0

function setup(thread)
  thread:set("tid", threads)
  threads = threads + 1
end

local n = 0
function request()
  n = n + 1
  local at = due + (n % 2 == 0 and 3600000 or -3600000)
  return wrk.format("GET", string.format("/delay-queue/api/jobs/reschedule?job_id=rs-%d-%d&deliver_at_ms=%d",
                                         tid, n % jobs, at))
end

dofile(os.getenv("BENCH_LUA_DIR") .. "/report.lua")
