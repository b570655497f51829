-- wrk script of the pull phase: pops up to BENCH_MAX jobs of BENCH_TOPIC (waiting up to a second
-- for one), then finishes each job it got, one request each (or, with BENCH_BATCH set, all of
-- them, up to 100, in one request), then pops again. A thread's connections share its jobs to finish
-- (wrk's Lua state is per thread).
local topic = os.getenv("BENCH_TOPIC")
local max = tonumber(os.getenv("BENCH_MAX"))
local batch = os.getenv("BENCH_BATCH") == "1"
local headers = { ["Content-Type"] = "application/json" }
local pop = string.format('{"topic":"%s","max":%d,"wait_ms":1000}', topic, max)
local todo = {}

function request()
  if batch and #todo > 0 then
    local items = {}
    while #todo > 0 and #items < 100 do   -- a finish takes 100 jobs at most
      local j = table.remove(todo)
      items[#items + 1] = string.format('{"job_id":"%s","receipt":"%s"}', j[1], j[2])
    end
    return wrk.format("POST", "/delay-queue/api/jobs/finish", headers,
                      '{"jobs":[' .. table.concat(items, ",") .. ']}')
  end
  local j = table.remove(todo)
  if j then
    return wrk.format("POST", "/delay-queue/api/jobs/finish", headers,
                      string.format('{"job_id":"%s","receipt":"%s"}', j[1], j[2]))
  end
  return wrk.format("POST", "/delay-queue/api/jobs/pop", headers, pop)
end

function response(status, hdrs, body)
  for id, receipt in string.gmatch(body, '{"id":%s*"([^"]*)".-"receipt":%s*"([^"]*)"') do
    todo[#todo + 1] = { id, receipt }
  end
end

dofile(os.getenv("BENCH_LUA_DIR") .. "/report.lua")
