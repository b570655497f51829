/* pullq_lua: the text of the pull queues' Lua scripts, part of pullq; the shared inside is
 * include/pull/pullq_link.h. Each script changes one topic's keys (one hash tag) in one step,
 * so that no crash between two steps loses or doubles a job. */
#include "pull/pullq_link.h"

_Static_assert(JOB_TTR_ONCE_MS == 1, "JOB_TTR_ONCE_TEXT must say JOB_TTR_ONCE_MS");

#define JOB_TTR_ONCE_TEXT "1"   /* JOB_TTR_ONCE_MS, for the Lua text */

/* now: Redis's own clock, epoch ms, so that every instance's scripts agree on what is ready
 * and when a reservation ends, whatever their own clocks say. */
#define LUA_NOW \
    "local tm = redis.call('TIME')\n" \
    "local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)\n"


/* KEYS: ready, job, later. ARGV: id, record, due_ms, ttr_ms, channel, topic, max_pops (the job's
 * own limit of receives: 0 none given, -1 no limit; kept as 'max', -1 as 0). A hash of the
 * same due time is this job's, made ready before (its message read again after a crash): left
 * alone, also when it has been finished since. A job made ready is announced on channel (the
 * topic), for the pops that wait on any instance, and leaves the jobs added for later. */
static const char ready_lua[] =
    "redis.call('ZREM', KEYS[3], ARGV[1])\n"
    "local st = redis.call('HGET', KEYS[2], 'st')\n"
    "if st then\n"
    "  if redis.call('HGET', KEYS[2], 'due') == ARGV[3] then return 1 end\n"
    "  if st == 'r' or st == 'R' or st == 'b' then return 2 end\n"
    "  redis.call('DEL', KEYS[2])\n"
    "end\n"
    "redis.call('HSET', KEYS[2], 'rec', ARGV[2], 'due', ARGV[3], 'st', 'r', 'att', '0',\n"
    "           'ttr', ARGV[4])\n"
    "local mp = tonumber(ARGV[7])\n"
    "if mp ~= 0 then redis.call('HSET', KEYS[2], 'max', tostring(math.max(mp, 0))) end\n"
    "redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])\n"
    "redis.call('PUBLISH', ARGV[5], ARGV[6])\n"
    "return 0\n";

/* The receive limit of a job whose 'max' field is own (nil: the instance's max, named by
 * setting): limit (0: none) and the words that name it. */
#define LUA_LIMIT \
    "local function limit(own, max, setting)\n" \
    "  if own then return tonumber(own), 'its own limit is ' .. own end\n" \
    "  return max, setting .. ' is ' .. max\n" \
    "end\n"

/* KEYS: ready, reserved, dead, paused. ARGV: (unused), max, ttr_ms (0: the job's, else default), default
 * ttr_ms, receipt start, job key prefix, ":" .. topic, retention_ms, max_attempts (0: none).
 * Answers how many it buried, then id, record, attempt, receipt, until, due for each job
 * handed out. A job whose own ttr is JOB_TTR_ONCE_MS is finished as it is handed out, with no
 * receipt. A job received
 * max_attempts times already, or its own limit (reservations that ran out, or released) is not
 * handed out again: it is buried, for the sweep to send to the dead letters. A reservation keeps the ttr
 * it was given (rttr), which a touch without one renews. A paused topic hands out nothing. */
static const char pop_lua[] =
    "if redis.call('EXISTS', KEYS[4]) == 1 then return {0} end\n"
    LUA_NOW
    LUA_LIMIT
    "local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))\n"
    "local out = {0}\n"
    "for i, id in ipairs(ids) do\n"
    "  local jk = ARGV[6] .. id\n"
    "  local f = redis.call('HMGET', jk, 'rec', 'att', 'ttr', 'due', 'st', 'max')\n"
    "  redis.call('ZREM', KEYS[1], id)\n"
    "  local max, named = limit(f[6], tonumber(ARGV[9]), 'pull.max_attempts')\n"
    "  if f[1] and f[5] == 'r' and max > 0 and (tonumber(f[2]) or 0) >= max then\n"
    "    redis.call('ZADD', KEYS[3], now, id)\n"
    "    redis.call('HSET', jk, 'st', 'b', 'why', 'received ' .. f[2] .. ' times without being '\n"
    "               .. 'finished (' .. named .. ')')\n"
    "    out[1] = out[1] + 1\n"
    "  elseif f[1] and f[5] == 'r' then\n"
    "    local att = (tonumber(f[2]) or 0) + 1\n"
    "    local rc, untl = '', tostring(now)\n"
    "    if tonumber(f[3]) == " JOB_TTR_ONCE_TEXT " then\n"
    "      redis.call('HSET', jk, 'st', 'f', 'att', tostring(att), 'done', tostring(now))\n"
    "      redis.call('PEXPIRE', jk, ARGV[8])\n"
    "    else\n"
    "      local ttr = tonumber(ARGV[3])\n"
    "      if ttr <= 0 then ttr = tonumber(f[3]) or 0 end\n"
    "      if ttr <= 0 then ttr = tonumber(ARGV[4]) end\n"
    "      untl = tostring(now + ttr)\n"
    "      rc = ARGV[5] .. i .. '.' .. att .. ARGV[7]\n"
    "      redis.call('HSET', jk, 'st', 'R', 'att', tostring(att), 'rcpt', rc, 'until', untl,\n"
    "                 'rttr', tostring(ttr))\n"
    "      redis.call('ZADD', KEYS[2], untl, id)\n"
    "    end\n"
    "    table.insert(out, id); table.insert(out, f[1]); table.insert(out, att)\n"
    "    table.insert(out, rc); table.insert(out, untl); table.insert(out, f[4])\n"
    "  end\n"
    "end\n"
    "return out\n";

/* KEYS: ready, reserved, dead, job. ARGV: verb, id, receipt, after_ms (a release's delay; a
 * touch's ttr, or -1 for the job's own ttr, else the reservation's, else default_ttr_ms),
 * (unused), retention_ms, reason, default_ttr_ms, channel, topic. A released job is announced
 * on channel: its topic when it is ready now, "peek:" and its topic when later (the pops that
 * hear of it look when it comes).
 * Answers {result, state[, until]}: result 1 done, 2 done before, 0 no job, -1 stale receipt,
 * -2 not live.
 * A finish repeated with its receipt is done again (the first answer may have been lost). */
static const char op_lua[] =
    LUA_NOW
    "local f = redis.call('HMGET', KEYS[4], 'st', 'rcpt')\n"
    "local st, verb, id = f[1], ARGV[1], ARGV[2]\n"
    "if not st then return {0, ''} end\n"
    "local function gone(s)\n"
    "  redis.call('HSET', KEYS[4], 'st', s, 'done', tostring(now))\n"
    "  redis.call('HDEL', KEYS[4], 'until')\n"
    "  redis.call('PEXPIRE', KEYS[4], ARGV[6])\n"
    "end\n"
    "if verb == 'cancel' then\n"
    "  if st ~= 'r' and st ~= 'R' then return {-2, st} end\n"
    "  redis.call('ZREM', KEYS[1], id); redis.call('ZREM', KEYS[2], id)\n"
    "  redis.call('HDEL', KEYS[4], 'rcpt')\n"
    "  gone('c')\n"
    "  return {1, 'c'}\n"
    "end\n"
    "if verb == 'finish' and st == 'f' and f[2] == ARGV[3] then return {2, 'f'} end\n"
    "if st ~= 'R' or f[2] ~= ARGV[3] then return {-1, st} end\n"
    "if verb == 'finish' then\n"
    "  redis.call('ZREM', KEYS[2], id)\n"
    "  gone('f')\n"
    "  return {1, 'f'}\n"
    "elseif verb == 'release' then\n"
    "  redis.call('ZREM', KEYS[2], id)\n"
    "  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[4]), id)\n"
    "  redis.call('PUBLISH', ARGV[9], (tonumber(ARGV[4]) > 0 and 'peek:' or '') .. ARGV[10])\n"
    "  redis.call('HSET', KEYS[4], 'st', 'r')\n"
    "  redis.call('HDEL', KEYS[4], 'rcpt', 'until')\n"
    "  return {1, 'r'}\n"
    "elseif verb == 'touch' then\n"
    "  local ttr = tonumber(ARGV[4])\n"
    "  if ttr < 0 then\n"
    "    local own = redis.call('HMGET', KEYS[4], 'ttr', 'rttr')\n"
    "    ttr = tonumber(own[1]) or 0\n"
    "    if ttr <= " JOB_TTR_ONCE_TEXT " then ttr = tonumber(own[2]) or tonumber(ARGV[8]) end\n"
    "  end\n"
    "  local untl = tostring(now + ttr)\n"
    "  redis.call('ZADD', KEYS[2], untl, id)\n"
    "  redis.call('HSET', KEYS[4], 'until', untl)\n"
    "  return {1, 'R', untl}\n"
    "end\n"
    "redis.call('ZREM', KEYS[2], id)\n"
    "redis.call('ZADD', KEYS[3], now, id)\n"
    "redis.call('HSET', KEYS[4], 'st', 'b', 'why', ARGV[7])\n"
    "redis.call('HDEL', KEYS[4], 'rcpt', 'until')\n"
    "return {1, 'b'}\n";

/* KEYS: ready, reserved, dead, paused, later. ARGV: (unused), max_attempts, limit, job key
 * prefix, resend_ms, channel, topic, forget_ms. Answers back, ready, reserved, buried, next (when
 * the next reservation ends or dead letter is due, epoch ms; -1: none), keep (1: the topic is
 * paused or has jobs added for later, so it stays in the registry), then id, record, why,
 * attempt of each dead letter
 * to send. Jobs ready again are announced on channel ("peek:" and the topic: some are). */
static const char sweep_lua[] =
    LUA_NOW
    LUA_LIMIT
    "local lim = tonumber(ARGV[3])\n"
    "local back = 0\n"
    /* an added job that was removed, or whose add failed, is forgotten forget_ms after it
     * would have been due */
    "redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now - tonumber(ARGV[8]))\n"
    "local keep = redis.call('EXISTS', KEYS[4])\n"
    "if redis.call('ZCARD', KEYS[5]) > 0 then keep = 1 end\n"
    "local out = {0, redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[2]),\n"
    "             redis.call('ZCARD', KEYS[3]), -1, keep}\n"
    "if out[3] == 0 and out[4] == 0 then return out end\n"
    "for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, lim)) do\n"
    "  local jk = ARGV[4] .. id\n"
    "  local f = redis.call('HMGET', jk, 'att', 'due', 'st', 'max')\n"
    "  redis.call('ZREM', KEYS[2], id)\n"
    "  if f[3] == 'R' then\n"
    "    local att = tonumber(f[1]) or 0\n"
    "    local max, named = limit(f[4], tonumber(ARGV[2]), 'pull.max_attempts')\n"
    "    if max > 0 and att >= max then\n"
    "      redis.call('ZADD', KEYS[3], now, id)\n"
    "      redis.call('HSET', jk, 'st', 'b', 'why', 'not finished within its time to run ' ..\n"
    "                 att .. ' times (' .. named .. ')')\n"
    "    else\n"
    "      redis.call('ZADD', KEYS[1], f[2] or now, id)\n"
    "      redis.call('HSET', jk, 'st', 'r')\n"
    "      back = back + 1\n"
    "    end\n"
    "    redis.call('HDEL', jk, 'rcpt', 'until')\n"
    "  end\n"
    "end\n"
    "if back > 0 then redis.call('PUBLISH', ARGV[6], 'peek:' .. ARGV[7]) end\n"
    "out[1] = back\n"
    "for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, lim)) do\n"
    "  local f = redis.call('HMGET', ARGV[4] .. id, 'rec', 'why', 'att', 'st')\n"
    "  if f[1] and f[4] == 'b' then\n"
    "    redis.call('ZADD', KEYS[3], now + tonumber(ARGV[5]), id)\n"
    "    table.insert(out, id); table.insert(out, f[1]); table.insert(out, f[2] or '')\n"
    "    table.insert(out, tonumber(f[3]) or 0)\n"
    "  else\n"
    "    redis.call('ZREM', KEYS[3], id)\n"
    "  end\n"
    "end\n"
    "out[2], out[3], out[4] = redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[2]),\n"
    "                         redis.call('ZCARD', KEYS[3])\n"
    "for k = 2, 3 do\n"
    "  local first = redis.call('ZRANGE', KEYS[k], 0, 0, 'WITHSCORES')\n"
    "  if first[2] and (out[5] < 0 or tonumber(first[2]) < out[5]) then\n"
    "    out[5] = tonumber(first[2])\n"
    "  end\n"
    "end\n"
    "return out\n";

/* KEYS: dead, job. ARGV: id, retention_ms. */
static const char sent_lua[] =
    "redis.call('ZREM', KEYS[1], ARGV[1])\n"
    "if redis.call('HGET', KEYS[2], 'st') == 'b' then\n"
    "  redis.call('HSET', KEYS[2], 'st', 'd')\n"
    "  redis.call('PEXPIRE', KEYS[2], ARGV[2])\n"
    "end\n"
    "return 1\n";

/* KEYS: registry. ARGV: before_ms, topics... Each topic registered before before_ms leaves
 * the registry; one registered since (a job made ready meanwhile) stays. Answers how many left. */
static const char forget_lua[] =
    "local n = 0\n"
    "for i = 2, #ARGV do\n"
    "  local at = redis.call('ZSCORE', KEYS[1], ARGV[i])\n"
    "  if at and tonumber(at) < tonumber(ARGV[1]) then\n"
    "    redis.call('ZREM', KEYS[1], ARGV[i]); n = n + 1\n"
    "  end\n"
    "end\n"
    "return n\n";

/* KEYS: ready, paused. Answers {how many may be popped now, 0}, or {0, in how many ms the
 * first may} ({0, -1}: none is ready, or the topic is paused). */
static const char peek_lua[] =
    "if redis.call('EXISTS', KEYS[2]) == 1 then return {0, -1} end\n"
    LUA_NOW
    "local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')\n"
    "if not first[2] then return {0, -1} end\n"
    "if tonumber(first[2]) > now then return {0, tonumber(first[2]) - now} end\n"
    "return {redis.call('ZCOUNT', KEYS[1], '-inf', now), 0}\n";

/* KEYS: ready, reserved, dead, paused, later. Answers ready now, delayed (added and not yet
 * due, or released with a delay), reserved, buried, the score of the oldest job ready now (-1:
 * none), paused, now (epoch ms). */
static const char figures_lua[] =
    LUA_NOW
    "local ready = redis.call('ZCOUNT', KEYS[1], '-inf', now)\n"
    "local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')\n"
    "local oldest = -1\n"
    "if first[2] and tonumber(first[2]) <= now then oldest = tonumber(first[2]) end\n"
    "local later = redis.call('ZCOUNT', KEYS[5], '(' .. now, '+inf')\n"
    "return {ready, redis.call('ZCARD', KEYS[1]) - ready + later, redis.call('ZCARD', KEYS[2]),\n"
    "        redis.call('ZCARD', KEYS[3]), oldest, redis.call('EXISTS', KEYS[4]), now}\n";

/* KEYS: paused. ARGV: "1" to pause, "0" to resume, channel, topic. A resumed topic is announced
 * ("peek:" and the topic), so that the pops waiting on it look at once. Answers 1 when the
 * state changed, 0 when it was so already. */
static const char pause_lua[] =
    "if ARGV[1] == '1' then return redis.call('SET', KEYS[1], '1', 'NX') and 1 or 0 end\n"
    "local n = redis.call('DEL', KEYS[1])\n"
    "redis.call('PUBLISH', ARGV[2], 'peek:' .. ARGV[3])\n"
    "return n\n";

/* KEYS: ready (for "ready" and "delayed") or reserved. ARGV: state ("ready": may be popped now,
 * "delayed": later, "reserved"), limit, job key prefix, the cursor's score and id ("" ""
 * for the first page), preview bytes. Answers, oldest first (by score, then id), for each job:
 * id, score (when it may be popped, or its reservation ends), state letter, attempt, due, body
 * preview, body bytes. The jobs after the cursor's (score, id) only. */
static const char list_lua[] =
    LUA_NOW
    "local state, lim, prefix = ARGV[1], tonumber(ARGV[2]), ARGV[3]\n"
    "local after, after_id, cut = tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6])\n"
    "local lo, hi = '-inf', '+inf'\n"
    "if state == 'ready' then hi = tostring(now)\n"
    "elseif state == 'delayed' then lo = '(' .. now end\n"
    "if after and (state ~= 'delayed' or after > now) then lo = ARGV[4] end\n"
    "local out, n, off = {}, 0, 0\n"
    "while n < lim do\n"
    "  local page = redis.call('ZRANGEBYSCORE', KEYS[1], lo, hi, 'WITHSCORES', 'LIMIT', off, lim)\n"
    "  if #page == 0 then break end\n"
    "  off = off + #page / 2\n"
    "  for i = 1, #page, 2 do\n"
    "    local id, sc = page[i], page[i + 1]\n"
    "    if n < lim and not (after and tonumber(sc) == after and id <= after_id) then\n"
    "      local f = redis.call('HMGET', prefix .. id, 'rec', 'st', 'att', 'due')\n"
    "      local body, size = '', 0\n"
    "      if f[1] then\n"
    "        local at = select(5, string.match(f[1], '" JOB_RECORD_HEAD "'))\n"
    "        local ok, t = pcall(cmsgpack.unpack, string.sub(f[1], at or 1))\n"
    "        if ok and type(t) == 'table' and type(t[2]) == 'string' then\n"
    "          body, size = string.sub(t[2], 1, cut), #t[2]\n"
    "        end\n"
    "      end\n"
    "      for _, v in ipairs({id, sc, f[2] or '', f[3] or '0', f[4] or '', body, size}) do\n"
    "        table.insert(out, v)\n"
    "      end\n"
    "      n = n + 1\n"
    "    end\n"
    "  end\n"
    "end\n"
    "return out\n";

const char *const pullq_script_text[S_COUNT] = { ready_lua, pop_lua, op_lua, sweep_lua,
                                                sent_lua, forget_lua, peek_lua, figures_lua,
                                                pause_lua, list_lua };
