/* store_lua: the text of the record scripts (enum script in include/redis/store_link.h), which
 * conn loads on every connection and store's calls name by index. Each reads a record's head as
 * job.h lays it out (JOB_RECORD_HEAD). */
#include "redis/store_link.h"

#define READ_RECORD                                                                        \
    "local v = redis.pcall('GET', key)\n"                                                  \
    "if type(v) == 'table' then v = '' end\n"                                              \
    "local st, due, stamp, claim, at\n"                                                    \
    "if v then st, due, stamp, claim, at = string.match(v, '" JOB_RECORD_HEAD "') end\n"   \
    "local function tail() return string.sub(v, at) end\n"

/* Puts head in place of the head of record v (key), which ends before position at: written over
 * it when the two have the same length (a record with room for the claim token), else the whole
 * value again (one written before that room existed), keeping the expiry. */
#define WRITE_HEAD                                                                         \
    "local function write_head(key, v, at, head)\n"                                        \
    "  if at == #head + 1 then\n"                                                         \
    "    redis.call('SETRANGE', key, '0', head)\n"                                        \
    "  else\n"                                                                            \
    "    redis.call('SET', key, head .. string.sub(v, at), 'KEEPTTL')\n"                  \
    "  end\n"                                                                             \
    "end\n"

/* A script on one record: key is KEYS[1]. */
#define ONE_RECORD "local key = KEYS[1]\n" READ_RECORD

/* A script on many records, one call per CHUNK_MAX of a batch, so Redis sets up a script call
 * once for many records: function one(i, key) runs for KEYS[i] and its reply is the i-th of
 * the array returned. Records are independent; each is still changed atomically. */
#define EACH_RECORD(args) "local function one(" args ", key)\n" READ_RECORD
#define END_EACH(call)                                                                      \
    "end\n"                                                                                \
    "local out = {}\n"                                                                     \
    "for i = 1, #KEYS do out[i] = " call " end\n"                                          \
    "return out\n"

/* Every script reads the record of key the same way: v is false when there is none, '' when
 * the key holds something else; st, due, stamp and claim are the head's fields (st is nil when
 * the value is no record of ours) and tail the msgpack after the head. See job.h for the layout.
 *
 * Add, ARGV per record: record, ttl ms, override ("1": a pending or removed job of the id is
 * replaced; its messages then carry a tag that is not the new record's, and are skipped; "2":
 * a failed one is, a redriven dead letter's).
 * Returns {result, state letter} per record: 0 added,
 * 1 the same job is there (same topic and body; then also its claim field, a pending record's
 * tag, and due time, so that the add can send its message again), 2 another job has the id, 3
 * the key holds no record; or the
 * error of its SET (such as OOM) as that record's answer, not the whole call's.
 * The add tries SET NX on its own first (build_plain_add) and runs this only for an id it found
 * taken; the SET NX here adds a record that expired in between. */
static const char add_lua[] =
    "local function one(record, ttl, override, key)\n"
    "local r = redis.pcall('SET', key, record, 'PX', ttl, 'NX')\n"
    "if type(r) == 'table' and r.err then return r end\n"
    "if r then return {0, 'p'} end\n"
    READ_RECORD
    "if not st then return {3, ''} end\n"
    "if (override == '1' and (st == 'p' or st == 'c')) or (override == '2' and st == 'f') then\n"
    "  redis.call('SET', key, record, 'PX', ttl)\n"
    "  return {0, 'p'}\n"
    "end\n"
    "if st ~= 'c' then\n"
    "  local ok, rec = pcall(cmsgpack.unpack, tail())\n"
    "  local mine = cmsgpack.unpack(string.sub(record, select(5, string.match(record, '" JOB_RECORD_HEAD "'))))\n"
    "  if ok and type(rec) == 'table' and rec[1] == mine[1] and rec[2] == mine[2] then\n"
    "    return {1, st, claim, due}\n"
    "  end\n"
    "end\n"
    "return {2, st}\n"
    END_EACH("one(ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i], KEYS[i])");

/* ARGV (optional): the tag of the add whose record it is to be. Returns 1 when the pending
 * record (of that add) was deleted, else the state letter of the record there ('' for none). */
static const char drop_lua[] =
    ONE_RECORD
    "if st == 'p' and (not ARGV[1] or claim == ARGV[1]) then return redis.call('DEL', key) end\n"
    "return st or ''\n";

/* ARGV: now ms, ttl ms, and optionally the head the caller read the record with. Returns
 * {result, state letter}: 0 removed, 1 no job (or a pending record whose head is not that one:
 * another job of the id, added since), 2 too late, 3 the key holds no record. The stamp goes
 * where the tag (or the claim room) was, as a mark's does. */
static const char remove_lua[] =
    WRITE_HEAD
    ONE_RECORD
    "if not v then return {1, ''} end\n"
    "if not st then return {3, ''} end\n"
    "if st == 'p' and ARGV[3] and string.sub(v, 1, at - 1) ~= ARGV[3] then return {1, ''} end\n"
    "if st == 'p' then\n"
    "  write_head(key, v, at, 'c' .. due .. '|' .. ARGV[1] .. '||')\n"
    "  redis.call('PEXPIRE', key, ARGV[2])\n"
    "  return {0, 'c'}\n"
    "end\n"
    "return {2, st}\n";

/* Claim, ARGV: "<instance>:", then per record the due ms of the message (its dq-due-ms, or the
 * due time a reschedule moved it on to) or "", its dq-tag or "",
 * its claim token "<instance>:<message>" (forwarder.c), and the claim of another instance it may
 * take over ("*": whichever it finds), or "". Returns per record: {} when no record, {'other', claim} when the record is
 * being delivered under another instance's claim that it may not take over, {'stale'} when the message's due time is not the record's and the record is not pending under
 * the message's tag (an earlier job's message with this id, or the job's old message after it
 * was rescheduled), {'moved', due} when the pending job was rescheduled to the later due time
 * due (its message is to move on to it; rescheduled to an earlier time, the job is due and
 * claimed), {'wait'} when it was rescheduled to an earlier time and the message for that time
 * may still be on its way to Kafka (the pending record's stamp field holds until when, epoch
 * ms: till then only that message claims it, so that the reschedule's answer tells how it was
 * delivered),
 * {'foreign'} when it is not one of the pending job's own messages (its tag is not the one the
 * record holds in its claim field: any producer can write a dq-id, not the tag; a record written
 * before tags holds JOB_CLAIM_ROOM and asks for none), {'busy'} when another message of the job
 * (a copy
 * left by a crash in the middle of a move down the levels) is being delivered by this instance,
 * {state} when not claimable, {state, value} when claimed, and {'', value} for a value that is
 * no record (the caller dead-letters it). A delivering record claimed by another instance is
 * taken over only with that claim named: the caller first learns that its owner's lease is gone. The token goes over the room a pending record holds for it
 * (SETRANGE: the value is not copied, and the AOF gets the head instead of the whole record);
 * a record written before that room existed is rewritten whole. */
static const char claim_lua[] =
    WRITE_HEAD
    EACH_RECORD("mdue, mtag, token, take, instance")
    "if not v then return {} end\n"
    "if not st then return {'', v} end\n"
    "local tagged = st == 'p' and claim ~= '' and claim ~= '" JOB_CLAIM_ROOM "'\n"
    "if tagged and claim ~= mtag then return {'foreign'} end\n"
    /* the message whose claim this is, read again (a restart, a take-over, a lost reply) */
    "local again = st == 's' and string.sub(claim, #instance + 1) == string.sub(token, #instance + 1)\n"
    "if mdue ~= '' and due ~= mdue and not again then\n"
    "  if not tagged then return {'stale'} end\n"
    "  if tonumber(due) > tonumber(mdue) then return {'moved', due} end\n"
    "  if stamp ~= '' then\n"
    "    local t = redis.call('TIME')\n"
    "    if tonumber(stamp) > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) then\n"
    "      return {'wait'}\n"
    "    end\n"
    "  end\n"
    "end\n"
    "if st == 's' and claim ~= token then\n"
    "  if string.sub(claim, 1, #instance) == instance then return {'busy'} end\n"
    "  if claim ~= take and take ~= '*' then return {'other', claim} end\n"
    "end\n"
    "if st == 'p' or st == 's' then\n"
    "  write_head(key, v, at, 's' .. due .. '||' .. token .. '|')\n"
    "  return {st, v}\n"
    "end\n"
    "return {st}\n"
    END_EACH("one(ARGV[4 * i - 2], ARGV[4 * i - 1], ARGV[4 * i], ARGV[4 * i + 1], ARGV[1], KEYS[i])");

/* Mark, ARGV per record: the head its claim wrote ("s<due>||<token>|"), the head to write in its
 * place ("<letter><due>|<now>|<rest of the token>|": the stamp takes the token's place, so the
 * two have the same length), a ttl in ms to renew the expiry with, or "" to keep it, why the
 * job failed, or "" (appended to the record as a msgpack string, see job.h), and a new tail, or
 * "" to keep the record's (a callback job's tail holds how its calls went).
 * Returns 1 per record marked, 0 per record no longer claimed by that token (delivered, or taken
 * over by another instance). The head is compared and written in place: no read or write of
 * the tail, and a few bytes to the AOF instead of the whole value. Numbers go to redis.call as
 * strings, which Lua would otherwise format with printf's floating point. */
static const char mark_lua[] =
    "local function one(claimed, head, ttl, why, tail, key)\n"
    "local v = redis.pcall('GETRANGE', key, '0', tostring(#claimed - 1))\n"
    "if v ~= claimed then return 0 end\n"
    "if tail ~= '' then\n"
    "  redis.call('SET', key, head .. tail, 'KEEPTTL')\n"
    "elseif #head == #claimed then\n"
    "  redis.call('SETRANGE', key, '0', head)\n"
    "else\n"
    "  v = redis.call('GET', key)\n"
    "  redis.call('SET', key, head .. string.sub(v, #claimed + 1), 'KEEPTTL')\n"
    "end\n"
    "if why ~= '' then redis.call('APPEND', key, cmsgpack.pack(why)) end\n"
    "if ttl ~= '' and redis.call('PTTL', key) < tonumber(ttl) then redis.call('PEXPIRE', key, ttl) end\n"
    "return 1\n"
    END_EACH("one(ARGV[5 * i - 4], ARGV[5 * i - 3], ARGV[5 * i - 2], ARGV[5 * i - 1], ARGV[5 * i], KEYS[i])");

/* Replace, ARGV: the head the record is to have still, the new value, its ttl ms. Returns 1 when
 * replaced, 0 when the head is another (claimed, removed or rescheduled meanwhile) or there is
 * no record. */
static const char replace_lua[] =
    "local head = redis.pcall('GETRANGE', KEYS[1], '0', tostring(#ARGV[1] - 1))\n"
    "if head ~= ARGV[1] then return 0 end\n"
    "redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])\n"
    "return 1\n";

/* Fail, ARGV: the due ms of the delivery that gave up, why, the ttl ms to keep it from now. A
 * record delivered with that due time (a pull job made ready, then buried or out of attempts)
 * becomes failed, with why appended as a mark's, so that a redrive finds it, and expires then
 * (it was kept while its pull job lived). Returns the state letter of the record after ('' for
 * none). */
static const char fail_lua[] =
    ONE_RECORD
    "if st ~= 'd' or due ~= ARGV[1] then return st or '' end\n"
    "redis.call('SETRANGE', key, '0', 'f')\n"
    "redis.call('APPEND', key, cmsgpack.pack(ARGV[2]))\n"
    "redis.call('PEXPIRE', key, ARGV[3])\n"
    "return 'f'\n";

const char *const store_script_text[S_COUNT] = { add_lua, drop_lua, remove_lua, claim_lua,
                                                mark_lua, replace_lua, fail_lua };
