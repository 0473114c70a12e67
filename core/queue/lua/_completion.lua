-- lua/_completion.lua: a request's completion (maybe_complete()), its follow-ups (follow_on()) and
--   their cancel.
-- One of the engine's helper files: it includes the helpers it uses, and only those
-- (scripts.py checks both).
-- Defines: completes, maybe_complete, cancel_held, unique_handover, follow_on.
--
--@include base requests readiness index unique

local follow_on  -- maybe_complete() and follow_on() call each other: defined below

-- Whether the request is finished once its counters say so (maybe_complete() records it).
local function completes(h)
  return (h.state == 'active' or h.state == 'cancelling')
    and h.waiting == 0 and h.leased == 0 and h.delayed == 0
end

-- Record a request's completion exactly once: stored, then announced. Returns the final state
-- or nil if the request is not finished.
local function maybe_complete(h, now)
  if not completes(h) then return nil end
  local final = 'done'
  if h.state == 'cancelling' then final = 'cancelled'
  elseif h.dead > 0 or h.discarded > 0 then final = 'failed' end
  set_state(h, final, now)
  set_field(h, 'finished_ms', now)
  if h.uk then unique_completed(h, final) end
  sync_ready(h)
  local ttl = h.retention_ms
  if h.dead > 0 then
    -- Its dead letters can be requeued, which needs the request: kept at least a week.
    ttl = math.max(ttl, KEEP_WITH_DEAD_MS)
  end
  if h.dead == 0 then
    -- No dead-letter map: its entries leave with the letters (requeue, delete_dead).
    if h.rel then
      redis.call('DEL', stream_key(h.id), rel_key(h.id))
    else
      redis.call('DEL', stream_key(h.id))
    end
  else
    redis.call('PEXPIRE', stream_key(h.id), ttl)
    redis.call('PEXPIRE', rel_key(h.id), ttl)
    redis.call('PEXPIRE', deadmap_key(h.id), ttl)
  end
  if h.prog then  -- a handler reported progress (progress.lua): kept as long as the request
    redis.call('PEXPIRE', progress_key(h.id), ttl)
    redis.call('PEXPIRE', progress_at_key(h.id), ttl)
  end
  if ttl == h.retention_ms and h.retention_text then
    redis.call('PEXPIRE', req_key(h.id), h.retention_text)  -- as stored: no number to write
    if h.res then redis.call('PEXPIRE', results_key(h.id), h.retention_text) end
  else
    redis.call('PEXPIRE', req_key(h.id), ttl)
    if h.res then redis.call('PEXPIRE', results_key(h.id), ttl) end
  end
  -- The index forgets requests whose hash has expired: once per call (finish()).
  local cutoff = now - ttl
  if not TRIM[final] or TRIM[final] < cutoff then TRIM[final] = cutoff end
  event('completed', h.id, 'state', final, 'done', text(h.done), 'dead', text(h.dead),
        'cancelled', text(h.cancelled))
  redis.call('PUBLISH', PREFIX .. 'done:' .. h.id, final)
  if h['then'] then follow_on(h, final, now) end
  return final
end

-- A held follow-up is cancelled with its parent: its tasks were never delivered (a held
-- request is never eligible), so moving the group's cursor past them drops them all. A held
-- request's tasks are not in the stats' waiting counts (w:<prio>: work that can run).
local function cancel_held(c, now, parent)
  redis.call('XGROUP', 'SETID', stream_key(c.id), GROUP, '$')
  local n = c.waiting
  add(c, 'waiting', -n)
  add(c, 'cancelled', n)
  set_state(c, 'cancelling', now)
  event('cancelled', c.id, 'dropped', text(n), 'running', '0', 'after', parent)
  maybe_complete(c, now)
end

-- A flow holds its unique key until its last step completes (a data job's key, its output
-- path, while its combine step writes it): the parent h, done, hands its key (an "active" or
-- "done+" scope) to the follow-up c it starts, unless another request took the key meanwhile.
local function unique_handover(h, c)
  if c.uk or string.sub(h.uk, 1, 8) == 'waiting|' then return end
  local k = uniq_key(uk_key(h.uk))
  local cur = redis.call('GET', k)
  if cur and cur ~= h.id then return end
  redis.call('SET', k, c.id)
  set_field(c, 'uk', h.uk)
end

-- The parent h completed as `final`: its held follow-ups start (done) or are cancelled
-- (cancelled), and so on down a chain. A failed parent leaves them held: requeuing its dead
-- letters reopens it, and its next completion decides again. Follow-ups no longer held
-- (cancelled by an operator, or started by an earlier completion) are left alone.
follow_on = function(h, final, now)
  if final == 'failed' then return end
  for cid in string.gmatch(h['then'], '[^ ]+') do
    local c = load_req(cid)
    if c and c.state == 'held' then
      if final == 'done' then
        set_state(c, 'active', now)
        bump_waiting_stat(c, c.waiting)
        if h.uk then unique_handover(h, c) end
        event('unheld', cid, 'after', h.id)
        sync_ready(c)
        maybe_complete(c, now)
      else
        cancel_held(c, now, h.id)
      end
    end
  end
end
