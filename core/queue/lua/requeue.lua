--[[ requeue: dead letters go back to waiting with their attempts reset. A failed request
is reopened (state back to "active"; it will complete again, as one new completion).

Two forms:
  ARGV[2] = "ids":     ARGV[3..] ids of entries in the dead stream (KEYS[9], KEYS[10] unused)
  ARGV[2] = "request": every dead letter of request ARGV[3] (KEYS[9], KEYS[10] its hash and stream)

KEYS[1..8] queue-level keys (see _base.lua)
KEYS[9], KEYS[10] request hash and task stream (form "request" only)
Derived:   req:<rid>, req:<rid>:tasks|rel|dead|progress|progress:at|results,
           tr:<prio>:<handler>:<tenant>, state:<state>, delayed:<prio>, dprio

ARGV[1] now (ms)

Returns {requeued, skipped}; skipped counts ids that are gone, or whose request has
expired or was cancelled.
Errors: -2 no such request (form "request"), -4 request cancelled (form "request")
--]]
--@include base requests readiness index tasks leasing

local now, mode = now_ms(ARGV[1]), ARGV[2]
local requeued, skipped = 0, 0

local function revive(h, tid, dead_id)
  local deliveries, holder = pending_info(h.id, tid)
  if holder ~= '~dead' then return false end
  redis.call('XDEL', K_DEAD, dead_id)
  redis.call('HDEL', deadmap_key(h.id), tid)
  write_rel(h, 'HSET', tid, deliveries)
  add(h, 'dead', -1)  -- the queue's `failed` total stays: it counts failures ever (a counter)
  to_waiting(h, tid)
  if h.state == 'failed' then
    set_state(h, 'active', now)
    for _, k in ipairs({req_key(h.id), stream_key(h.id), rel_key(h.id), deadmap_key(h.id),
                        progress_key(h.id), progress_at_key(h.id)}) do
      redis.call('PERSIST', k)
    end
    if h.res then redis.call('PERSIST', results_key(h.id)) end
    redis.call('HDEL', req_key(h.id), 'finished_ms')
    event('reopened', h.id)
  end
  return true
end

local touched = {}
if mode == 'request' then
  local rid = ARGV[3]
  local h = load_req(rid)
  if not h then return -2 end
  if h.state == 'cancelling' or h.state == 'cancelled' then return -4 end
  local last = '-'
  while redis.call('EXISTS', KEYS[10]) == 1 do  -- a request finished without dead letters has none
    local p = redis.call('XPENDING', KEYS[10], GROUP, last, '+', 500, '~dead')
    if #p == 0 then break end
    for _, e in ipairs(p) do
      local did = redis.call('HGET', deadmap_key(rid), e[1])
      if did and revive(h, e[1], did) then requeued = requeued + 1 else skipped = skipped + 1 end
      last = '(' .. e[1]
    end
  end
  touched[rid] = h
else
  for i = 3, #ARGV do
    local entry = redis.call('XRANGE', K_DEAD, ARGV[i], ARGV[i])
    local ok = false
    if #entry > 0 then
      local f = {}
      local kv = entry[1][2]
      for j = 1, #kv, 2 do f[kv[j]] = kv[j + 1] end
      local h = touched[f.request] or load_req(f.request)
      if h and h.state ~= 'cancelling' and h.state ~= 'cancelled' then
        ok = revive(h, f.task, ARGV[i])
        touched[f.request] = h
      end
    end
    if ok then requeued = requeued + 1 else skipped = skipped + 1 end
  end
end
for rid, h in pairs(touched) do
  if requeued > 0 then event('requeued', rid) end
  sync_ready(h)
end
dispatch_idle()
return {requeued, skipped}
