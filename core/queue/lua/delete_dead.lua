--[[ delete_dead: an operator removes dead letters for good. Each leaves the dead stream and
its task leaves the request's stream; the request counts it as "discarded" instead of
"dead" (a request that completes with discarded tasks is "failed", as with dead ones). Only
a letter still in the dead stream is deleted: one requeued or deleted meanwhile (a stale
page, a double click) is skipped. A letter whose request has expired is removed as well.

KEYS[1..8] queue-level keys (see _base.lua)
Derived:   req:<rid>, req:<rid>:tasks|rel|dead, state:<state>

ARGV[1] now (ms)   ARGV[2..] ids of entries in the dead stream (at most 1,000)

Returns {deleted, skipped}
Events:  "discarded" per request touched, with the count (the mirror marks its letters
         resolution = "deleted")
--]]
--@include base requests readiness tasks

now_ms(ARGV[1])
local deleted, skipped = 0, 0
local per_req, order = {}, {}
for i = 2, #ARGV do
  local did = ARGV[i]
  local entry = redis.call('XRANGE', K_DEAD, did, did)
  local ok = false
  if #entry > 0 then
    local f = {}
    local kv = entry[1][2]
    for j = 1, #kv, 2 do f[kv[j]] = kv[j + 1] end
    local rid, tid = f.request, f.task
    local h = rid and load_req(rid)
    if h then
      local _, holder = pending_info(rid, tid)
      if holder == '~dead' then
        retire(rid, tid)
        redis.call('HDEL', deadmap_key(rid), tid)
        redis.call('HDEL', rel_key(rid), tid)
        add(h, 'dead', -1)
        add(h, 'discarded', 1)
        ok = true
      end
    elseif rid then
      ok = true  -- its request expired: nothing counts it any more
    end
    if ok then
      redis.call('XDEL', K_DEAD, did)
      if not per_req[rid] then
        per_req[rid] = 0
        order[#order + 1] = rid
      end
      per_req[rid] = per_req[rid] + 1
    end
  end
  if ok then deleted = deleted + 1 else skipped = skipped + 1 end
end
for _, rid in ipairs(order) do
  event('discarded', rid, 'count', text(per_req[rid]))
end
stat('discarded', deleted)
return {deleted, skipped}
