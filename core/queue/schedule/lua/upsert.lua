--[[ upsert: create or change one schedule's definition.

KEYS[1] schedule hash   P:{Q}:sched:s:<name>
KEYS[2] due zset        P:{Q}:sched:due
KEYS[3] names zset      P:{Q}:sched:names
ARGV[1] name
ARGV[2] spec (JSON, keys sorted: equal text = equal schedule)
ARGV[3] next slot (ms), "" when it has none (ended)
ARGV[4] now (ms)
ARGV[5] mode: "create" (refused if it exists), "replace" (refused if not), "upsert"
ARGV[6] the version the caller saw, "" for any

Returns {status, version}: status 1 created, 2 changed, 0 unchanged (same spec: nothing
written, its next slot and runs kept); {-1} exists (create), {-2} no such schedule
(replace), {-7} changed since the caller read it (version differs).
A change bumps the version, so a scheduler's claim read before it is refused.
]]
local h = KEYS[1]
local cur = redis.call('HMGET', h, 'spec', 'version', 'paused', 'pending')
local exists = cur[1] ~= false
if ARGV[5] == 'create' and exists then return {-1} end
if ARGV[5] == 'replace' and not exists then return {-2} end
if ARGV[6] ~= '' and exists and cur[2] ~= ARGV[6] then return {-7} end
if exists and cur[1] == ARGV[2] then return {0, tonumber(cur[2])} end
local version = redis.call('HINCRBY', h, 'version', 1)
redis.call('HSET', h, 'spec', ARGV[2], 'next', ARGV[3], 'updated_ms', ARGV[4])
if not exists then redis.call('HSET', h, 'created_ms', ARGV[4]) end
redis.call('ZADD', KEYS[3], 0, ARGV[1])
if cur[3] then
  redis.call('ZREM', KEYS[2], ARGV[1])
elseif cur[4] then
  redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1])  -- a claimed slot still to be confirmed
elseif ARGV[3] ~= '' then
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
else
  redis.call('ZREM', KEYS[2], ARGV[1])
end
if exists then return {2, version} end
return {1, version}
