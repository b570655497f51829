-- wrk script for the precision phase: adds paced at BENCH_RATE jobs/s over all BENCH_THREADS
-- threads, each job with a random delay of 1-30 s that is not a whole second (so not on a level
-- boundary), a 200-byte body, to topic BENCH_TOPIC. wrk asks delay() before every request:
-- each call takes the thread's next slot on a fixed schedule, so a slow answer is caught up
-- afterwards instead of lowering the rate.
local ffi = require("ffi")
ffi.cdef[[
typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
int clock_gettime(int clk, bench_timespec *ts);
]]
local CLOCK_MONOTONIC = 1
local ts = ffi.new("bench_timespec")
local function now_ms()
  ffi.C.clock_gettime(CLOCK_MONOTONIC, ts)
  return tonumber(ts.tv_sec) * 1000 + tonumber(ts.tv_nsec) / 1e6
end

local topic = os.getenv("BENCH_TOPIC")
local interval = 1000 * tonumber(os.getenv("BENCH_THREADS")) / tonumber(os.getenv("BENCH_RATE"))
local body = string.rep("x", 200)
local t0, slot = nil, 0
local seeded = false

wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"

function delay()
  local t = now_ms()
  t0 = t0 or t
  local wait = t0 + slot * interval - t
  slot = slot + 1
  return wait > 0 and wait or 0
end

function request()
  if not seeded then   -- a different sequence in every thread
    math.randomseed(math.floor(now_ms() * 1000) % 2147483647)
    seeded = true
  end
  local d = math.random(1000, 30000)
  if d % 1000 == 0 then d = d + 1 end
  return wrk.format(nil, nil, nil, string.format('{"topic":"%s","delay_ms":%d,"body":"%s"}', topic, d, body))
end

dofile(os.getenv("BENCH_LUA_DIR") .. "/report.lua")
