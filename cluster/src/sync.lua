-- velvet-rope cluster tier: one host's sync of one room, atomically (the same steps, in the
-- same order, as `allocate` in allocator.rs; tests/stores_agree.rs holds the two to the same
-- answers).
--
-- KEYS[1]  the room's hash: fields `born`, `frontier`, `seq`, `clock`, `skew`, and `h:<host>`
--          (JSON entries)
-- KEYS[2]  the room's log of revocations (a stream; only read and written for reports with
--          a cursor `rc`)
-- ARGV[1]  the host's store name (id and counters' incarnation)
-- ARGV[2]  its report (JSON: seq, b, active, admitted, traffic, demand, at, am0, am1, live,
--          held; rc and rv for rooms whose sessions the origin may revoke)
-- ARGV[3]  the room's limits and lease terms (JSON: total, minute, lease, hold, learn)
-- ARGV[4]  the server's run_id as the client saw it ('' if unknown): another than the state
--          last saw means a restart or a failover (writes may be lost)
-- Returns the reply (JSON: seq, gt, b, gm0, gm1, frontier, behind, hosts, known, learning,
-- free, stale; rc and rv with a report's rc).

local key = KEYS[1]
local me = 'h:' .. ARGV[1]
local r = cjson.decode(ARGV[2])
local p = cjson.decode(ARGV[3])
local t = redis.call('TIME')
local raw = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
r.held = r.held or 0
-- Revocations travel apart from the report (see the end): the entry keeps neither.
local rev_cursor, rev_ids = r.rc, r.rv
r.rc = nil
r.rv = nil

-- The effective clock: never back, never forward by more than a lease between two calls
-- (see allocator.rs).
local last = redis.call('HGET', key, 'clock')
local skew = tonumber(redis.call('HGET', key, 'skew') or '0')
local now
if last == false then
  skew = 0
  now = raw
else
  last = tonumber(last)
  local eff = raw - skew
  if eff < last then
    skew = raw - last
    now = last
  elseif eff > last + p.lease then
    skew = raw - last - p.lease
    now = last + p.lease
  else
    now = eff
  end
end

local function reserved_minute(e, b)
  local er = e.report
  if er.b == b then
    return math.max(er.am0, e.gm0)
  elseif er.b + 1 == b then
    return math.max(er.am1, e.gm1)
  elseif b + 1 == er.b then
    return e.prev
  end
  return 0
end

-- Entries whose holdings lapsed go; this host's own is read before it is replaced.
local fields = redis.call('HGETALL', key)
local entries = {}
local mine = nil
for i = 1, #fields, 2 do
  local f = fields[i]
  if string.sub(f, 1, 2) == 'h:' then
    local e = cjson.decode(fields[i + 1])
    if f == me then
      mine = e
    elseif e.gone < now then
      redis.call('HDEL', key, f)
    else
      table.insert(entries, e)
    end
  end
end

-- Writes the store lost: another server than the one that wrote the state, a grant newer
-- than its record, or a reservation it does not hold.
local run = ARGV[4] or ''
local seen_run = redis.call('HGET', key, 'run')
local room_seq = tonumber(redis.call('HGET', key, 'seq') or '0')
local lost = r.seq > room_seq or (run ~= '' and seen_run ~= false and seen_run ~= run)
if mine ~= nil then
  lost = lost or r.seq > (mine.seq or 0)
else
  lost = lost or r.held ~= 0
end
local born = tonumber(redis.call('HGET', key, 'born') or now)
if lost then
  born = now
end
local learning = now - born < math.max(p.lease, p.learn or 0) + p.lease
local seq = math.max(room_seq, r.seq) + 1
-- A report older than the last grant to its host: computed on the store's newer record of
-- the host, and answered with what the store already reserves for it.
local stale = nil
if mine ~= nil and r.seq < (mine.seq or 0) then
  stale = mine
  r = mine.report
end
local prev = 0
if stale ~= nil then
  prev = stale.prev
elseif mine ~= nil then
  prev = reserved_minute(mine, r.b - 1)
end
local frontier = tonumber(redis.call('HGET', key, 'frontier') or '0')

local others, om0, om1 = 0, 0, 0
local occupied, admitted, traffic = r.active, r.admitted, r.traffic
local live = {}
-- Present hosts' unused allowance and waiters (for FIFO across hosts, below).
local present = {}
local hosts, known, oldest_bucket = 1, 1, r.b
for _, e in ipairs(entries) do
  local er = e.report
  known = known + 1
  others = others + math.max(er.at, e.gt)
  om0 = om0 + reserved_minute(e, r.b)
  om1 = om1 + reserved_minute(e, r.b + 1)
  occupied = occupied + er.active
  if e.exp >= now then
    hosts = hosts + 1
    oldest_bucket = math.min(oldest_bucket, er.b)
    if er.b == r.b then
      admitted = admitted + er.admitted
    end
    traffic = traffic + er.traffic
    for _, w in ipairs(er.live) do
      live[w[1]] = (live[w[1]] or 0) + w[2]
    end
    table.insert(present, {
      headroom = math.min(
        math.max(0, math.max(er.at, e.gt) - er.active),
        math.max(0, reserved_minute(e, er.b) - er.admitted)),
      live = er.live,
    })
  end
end
for _, w in ipairs(r.live) do
  live[w[1]] = (live[w[1]] or 0) + w[2]
end

-- The frontier moves over arrival buckets, oldest first, while the waiters it lets in fit in
-- the room's free slots; past everyone when they all fit, but never past the oldest bucket a
-- present host is in (a host whose clock runs ahead cannot drag it).
local free = math.max(0, math.min(p.total - occupied, p.minute - admitted))
local buckets = {}
local queued, ready = 0, 0
for b, n in pairs(live) do
  table.insert(buckets, b)
  queued = queued + n
  if b <= frontier then
    ready = ready + n
  end
end
table.sort(buckets)
for _, b in ipairs(buckets) do
  if b > frontier then
    if ready >= free then
      break
    end
    frontier = b
    ready = ready + live[b]
  end
end
if ready < free then
  frontier = math.max(frontier, oldest_bucket)
end
local behind = queued - math.min(ready, queued)
local own_ready, own_queued = 0, 0
for _, w in ipairs(r.live) do
  own_queued = own_queued + w[2]
  if w[1] <= frontier then
    own_ready = own_ready + w[2]
  end
end
local own_behind = own_queued - own_ready
-- Waiters of other hosts, older than bucket `j`, that their own host's unused allowance does
-- not cover: slots for them come first.
local function uncovered_before(j)
  local sum = 0
  for _, o in ipairs(present) do
    local older = 0
    for _, w in ipairs(o.live) do
      if w[1] < j then
        older = older + w[2]
      end
    end
    sum = sum + math.max(0, older - o.headroom)
  end
  return sum
end
local uncovered = uncovered_before(math.huge)
local room_total = math.max(0, p.total - others - r.active)

-- This host's waiters the frontier reached, oldest first, each after the older waiters
-- elsewhere; then its share of the free slots, following its traffic (evenly when nobody had
-- any), plus the chunk it asks for. New arrivals get nothing while anyone waits behind the
-- frontier, or waits elsewhere without an allowance for it. One headroom per bucket, within
-- both limits.
local ready_head = 0
for _, w in ipairs(r.live) do
  if w[1] <= frontier then
    local room = math.max(0, room_total - uncovered_before(w[1]) - ready_head)
    ready_head = ready_head + math.min(w[2], room)
  end
end
local share
if traffic == 0 then
  share = math.floor(free / hosts)
else
  share = math.floor(free * r.traffic / traffic)
end
local want = ready_head
if behind == 0 and uncovered == 0 then
  want = want + share + r.demand
end
local head0 = math.min(want, room_total, math.max(0, p.minute - om0 - r.admitted))
local head1 = math.min(want, room_total, math.max(0, p.minute - om1))
local gt = r.active + math.max(head0, head1)
local gm0 = r.admitted + head0
local gm1 = head1
if learning then
  gt = math.min(gt, r.at)
  gm0 = math.min(gm0, r.am0)
  gm1 = math.min(gm1, r.am1)
end
if stale ~= nil then
  gt = math.max(stale.report.at, stale.gt)
  gm0 = reserved_minute(stale, r.b)
  gm1 = reserved_minute(stale, r.b + 1)
end

local entry = {
  report = r, gt = gt, gm0 = gm0, gm1 = gm1, prev = prev, seq = seq,
  exp = now + p.lease, gone = now + p.lease + p.hold + p.lease,
}
redis.call('HSET', key, me, cjson.encode(entry), 'frontier', frontier, 'born', born, 'seq', seq,
  'clock', now, 'skew', skew)
if run ~= '' then
  redis.call('HSET', key, 'run', run)
end
redis.call('PEXPIRE', key, 2 * (p.lease + p.hold + p.lease))

-- Revocations (rooms whose sessions the origin may revoke send a cursor): the host's are
-- appended to the room's log (a stream, KEYS[2], trimmed to what is younger than the room's
-- state is kept), and the other hosts' after its cursor go back (at most 4096; the rest with
-- the next syncs). The same steps as `relay_revocations` in allocator.rs.
local rc_out = nil
local rv_out = nil
if rev_cursor ~= nil and KEYS[2] ~= nil then
  local log = KEYS[2]
  local keep = 2 * (p.lease + p.hold + p.lease)
  if rev_ids ~= nil then
    for _, id in ipairs(rev_ids) do
      redis.call('XADD', log, 'MINID', '~', string.format('%.0f', math.max(raw - keep, 0)), '*',
        'i', id, 'h', ARGV[1])
    end
  end
  local from = '-'
  if rev_cursor[1] > 0 or rev_cursor[2] > 0 then
    -- A log that ends before the cursor was made anew (lost, then written by a server whose
    -- clock is behind): read it from its start.
    local last = redis.call('XREVRANGE', log, '+', '-', 'COUNT', 1)
    local behind = true
    if #last > 0 then
      local ms, sq = string.match(last[1][1], '^(%d+)-(%d+)$')
      ms, sq = tonumber(ms), tonumber(sq)
      behind = ms < rev_cursor[1] or (ms == rev_cursor[1] and sq < rev_cursor[2])
    end
    if not behind then
      from = '(' .. string.format('%.0f-%.0f', rev_cursor[1], rev_cursor[2])
    end
  end
  local got = redis.call('XRANGE', log, from, '+', 'COUNT', 4096)
  rc_out = rev_cursor
  local ids = {}
  for _, e in ipairs(got) do
    local ms, sq = string.match(e[1], '^(%d+)-(%d+)$')
    rc_out = { tonumber(ms), tonumber(sq) }
    local f = {}
    for i = 1, #e[2], 2 do
      f[e[2][i]] = e[2][i + 1]
    end
    if f.h ~= ARGV[1] and f.i ~= nil then
      ids[#ids + 1] = f.i
    end
  end
  if #ids > 0 then
    rv_out = ids
  end
  if rev_ids ~= nil then
    redis.call('PEXPIRE', log, keep)
  end
end

return cjson.encode({
  seq = seq, gt = gt, b = r.b, gm0 = gm0, gm1 = gm1, frontier = frontier,
  behind = behind - math.min(own_behind, behind) + uncovered, hosts = hosts, known = known,
  learning = learning and 1 or 0, free = free, stale = stale ~= nil and 1 or 0,
  rc = rc_out, rv = rv_out,
})
