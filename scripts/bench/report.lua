-- Shared by the wrk scripts: one line that scripts/bench.py parses.
done = function(summary, latency, requests)
  io.write(string.format("BENCH requests=%d errors=%d non2xx=%d duration_us=%d p50_us=%d p99_us=%d max_us=%d\n",
    summary.requests, summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    summary.errors.status, summary.duration, latency:percentile(50), latency:percentile(99), latency.max))
end
