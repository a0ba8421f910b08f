#!lua
-- (The line above declares the script as one that writes, with no other flags, for Redis 7.0
-- and later: over `maxmemory`, the whole call is refused before any room is synced, not only
-- the calls that write first.)
-- velvet-rope cluster tier: one host's sync of its rooms, each atomically (the same steps,
-- in the same order, as `allocate` in allocator.rs; tests/stores_agree.rs holds the two to
-- the same answers).
--
-- A call costs the same however many hosts share the room: the room's sums over its hosts
-- (`agg`) are kept in its hash, and each call takes the calling host's old entry out of them
-- and puts its new one in; hosts whose lease or reservation ended are taken out a few per call
-- (at most LAPSES_PER_SYNC, soonest first, from a sorted set of deadlines; the set is read only
-- once the clock passes the earliest deadline the sums remember). A lapse not processed yet
-- keeps counting what it would release, which can only lower grants.
--
-- Most of a sync's time in the server is this script's own Lua, not the commands it runs
-- (BENCHMARKS.md), so what it handles is kept cheap for Redis's Lua: reports in MessagePack
-- (cmsgpack decodes several times faster than cjson), each host's entry and the room's state
-- as fixed records (`struct`), answers as MessagePack arrays, and numbers handed to commands
-- as whole-number strings. (Variants are compared by the instructions the server spends:
-- `cluster/bench/sync_instructions.py`.)
--
-- One script call syncs several rooms (one host's batch, or in a Redis Cluster the part of it
-- in one hash slot): the server's identity and clock are read once, and every room's sync
-- is its own (one that fails writes nothing and answers an error; the others go on).
--
-- Per room, three keys, in the order of the calls:
--   1. the room's hash: fields `st` (the room's state: its effective clock and skew, the last
--      grant's number `seq`, when it was `born`, the `frontier`, when the keys' expiry was last
--      pushed back `ttl`, and the sums below; see `encode_state`), `run` and `h:<host>`
--      (entries, see `encode_entry`). (Earlier builds kept the state's parts in fields of
--      their own, `agg` the sums in MessagePack: read when `st` is absent or `clock` present,
--      then dropped.)
--   2. the room's log of revocations (a stream; only read and written for reports with a
--      cursor `rc`)
--   3. the room's deadlines (a sorted set): `p:<host>` at the end of its lease while it counts
--      as present, `g:<host>` at the end of its reservation while it has an entry
-- ARGV[1]  the calls (MessagePack): an array of [host, report, terms] with the host's store
--          name (id and counters' incarnation), its report (seq, b, active, admitted, traffic,
--          demand, at, am0, am1, live, held; rc and rv for rooms whose sessions the origin may
--          revoke) and the room's limits and lease terms (total, minute, lease, hold, learn)
-- ARGV[2]  the server's `run_id` as read when the connection was made ('' if unknown); the
--          script adds the replication id it reads now (`INFO replication`). Together they
--          are the server's identity: another than a room's state last saw means a restart or
--          a failover, which may have lost writes (a server demoted and promoted again keeps
--          its run_id, not its replication id). Read here, in the same atomic step as the
--          syncs, no batch can be computed on a state that lost writes without knowing it.
-- ARGV[3]  (tests only; absent in production) the identity to use instead
-- ARGV[4]  (tests only; absent in production) the store's clock in ms, in place of TIME
-- Returns, per call, its reply (a MessagePack array: seq, gt, b, gm0, gm1, frontier, behind,
-- hosts, known, learning, free, queued, stale; rc and rv with a report's rc) or an error.

local LAPSES_PER_SYNC = 16
-- Later than any deadline (`nd` of a set read to its end).
local NO_DEADLINE = 2 ^ 53
local max, min, floor, abs = math.max, math.min, math.floor, math.abs

local raw
if ARGV[4] ~= nil and ARGV[4] ~= '' then
  raw = tonumber(ARGV[4])
else
  local t = redis.call('TIME')
  raw = tonumber(t[1]) * 1000 + floor(tonumber(t[2]) / 1000)
end
local identity = ARGV[3]
if identity == nil then
  local info = redis.call('INFO', 'replication')
  local replid = string.match(info, 'master_replid:(%w+)') or ''
  identity = ARGV[2] .. '/' .. replid
end


-- The room's sums being worked on (see `sync_room`), for the helpers below.
local agg

local function by_bucket(x, y)
  return x[1] < y[1]
end

local function reserved_minute(e, b)
  local er = e.report
  if er.b == b then
    return max(er.am0, e.gm0)
  elseif er.b + 1 == b then
    return max(er.am1, e.gm1)
  elseif b + 1 == er.b then
    return e.prev
  end
  return 0
end

local function reserved_total(e)
  return max(e.report.at, e.gt)
end

local function add(map, b, n)
  if n ~= 0 then
    local v = (map[b] or 0) + n
    if v == 0 then
      map[b] = nil
    else
      map[b] = v
    end
  end
end

-- A host's entry as stored (`h:<host>`): a fixed record (`struct`, little endian: a form byte,
-- then doubles, which hold every count and time exactly), then its waiters by bucket. Several
-- times cheaper to write and read than a MessagePack map in Redis's Lua.
local ENTRY_FORM = 1
local ENTRY = '<Bdddddddddddddddddd'
local ENTRY_LEN = struct.size(ENTRY)

local function encode_entry(e)
  local r = e.report
  local live = r.live
  local out = struct.pack(ENTRY, ENTRY_FORM, r.seq, r.b, r.active, r.admitted, r.traffic,
    r.demand, r.at, r.am0, r.am1, r.held, e.gt, e.gm0, e.gm1, e.prev, e.seq, e.exp, e.gone,
    #live)
  if #live == 0 then
    return out
  end
  local parts = { out }
  for i = 1, #live do
    local w = live[i]
    parts[i + 1] = struct.pack('<dd', w[1], w[2])
  end
  return table.concat(parts)
end

local function decode_entry(s)
  if string.byte(s, 1) ~= ENTRY_FORM then
    -- The form before (a MessagePack map, as earlier builds wrote it): read as it was, so
    -- that a room's state outlives the upgrade (its entries are written anew as they sync).
    local ok, e = pcall(cmsgpack.unpack, s)
    if not ok or type(e) ~= 'table' or type(e.report) ~= 'table'
        or type(e.report.live) ~= 'table' then
      error({ err = 'ERR a host entry of another form' })
    end
    e.report.held = e.report.held or 0
    return e
  end
  if #s < ENTRY_LEN then
    error({ err = 'ERR a host entry of another form' })
  end
  local form, seq, b, active, admitted, traffic, demand, at, am0, am1, held, gt, gm0, gm1,
    prev, eseq, exp, gone, n, at_live = struct.unpack(ENTRY, s)
  if form ~= ENTRY_FORM or #s ~= ENTRY_LEN + 16 * n then
    error({ err = 'ERR a host entry of another form' })
  end
  local live = {}
  for i = 1, n do
    local wb, wn = struct.unpack('<dd', s, at_live + 16 * (i - 1))
    live[i] = { wb, wn }
  end
  return {
    report = { seq = seq, b = b, active = active, admitted = admitted, traffic = traffic,
      demand = demand, at = at, am0 = am0, am1 = am1, live = live, held = held },
    gt = gt, gm0 = gm0, gm1 = gm1, prev = prev, seq = eseq, exp = exp, gone = gone,
  }
end

-- The room's state as stored (`st`): a fixed record (`struct`, little endian: a form byte,
-- then doubles: clock, skew, seq, born, frontier, ttl, the sums' n, np, rt, act, tr, dm, nd
-- (-1: none), and the sizes of the sums' maps m, a, c, l, u), then those maps' (bucket, value)
-- pairs in that order. Cheaper in Redis's Lua than the sums as a MessagePack map and the
-- parts as fields of their own (4.8 % of a sync's instructions, BENCHMARKS.md), as long as
-- it is packed and unpacked in one `struct` call each.
local STATE_FORM = 1
local STATE = '<Bdddddddddddddddddd'
local STATE_LEN = struct.size(STATE)
local MAPS = { 'm', 'a', 'c', 'l', 'u' }
-- (Values packed or unpacked by one `struct` call at most: Lua passes a few thousand at once.)
local SLICE = 1000

-- `vals[from..to]` as little-endian doubles.
local function pack_doubles(vals, from, to)
  local parts = {}
  for i = from, to, SLICE do
    local j = min(i + SLICE - 1, to)
    parts[#parts + 1] = struct.pack('<' .. string.rep('d', j - i + 1), unpack(vals, i, j))
  end
  return table.concat(parts)
end

local function encode_state(clock, skew, seq, born, frontier, ttl)
  local vals = { clock, skew, seq, born, frontier, ttl, agg.n, agg.np, agg.rt, agg.act, agg.tr,
    agg.dm, agg.nd or -1, 0, 0, 0, 0, 0 }
  for i = 1, #MAPS do
    local k = MAPS[i]
    local count = 0
    for b, v in pairs(agg[k]) do
      vals[#vals + 1] = b
      vals[#vals + 1] = v
      count = count + 1
    end
    vals[13 + i] = count
  end
  if #vals <= SLICE then
    return struct.pack('<B' .. string.rep('d', #vals), STATE_FORM, unpack(vals))
  end
  return string.char(STATE_FORM) .. pack_doubles(vals, 1, #vals)
end

-- The state `s` (see `encode_state`): clock, skew, seq, born, frontier, ttl and the sums.
local function decode_state(s)
  if #s < STATE_LEN or string.byte(s, 1) ~= STATE_FORM then
    error({ err = 'ERR a room state of another form' })
  end
  local _, clock, skew, seq, born, frontier, ttl, n, np, rt, act, tr, dm, nd, cm, ca, cc, cl,
    cu, at = struct.unpack(STATE, s)
  local counts = { cm, ca, cc, cl, cu }
  if not (cm >= 0 and ca >= 0 and cc >= 0 and cl >= 0 and cu >= 0 and cm % 1 == 0
      and ca % 1 == 0 and cc % 1 == 0 and cl % 1 == 0 and cu % 1 == 0) then
    error({ err = 'ERR a room state of another form' })
  end
  local values = 2 * (cm + ca + cc + cl + cu)
  if #s ~= STATE_LEN + 8 * values then
    error({ err = 'ERR a room state of another form' })
  end
  local got = {}
  for i = 1, values, SLICE do
    local take = min(SLICE, values - i + 1)
    if i == 1 and take == values then
      got = { struct.unpack('<' .. string.rep('d', take), s, at) }
    else
      local slice = { struct.unpack('<' .. string.rep('d', take), s, at) }
      for j = 1, take do
        got[i + j - 1] = slice[j]
      end
      at = slice[take + 1]
    end
  end
  local sums = { n = n, np = np, rt = rt, act = act, tr = tr, dm = dm }
  if nd >= 0 then
    sums.nd = nd
  end
  local i = 1
  for j = 1, #MAPS do
    local k = MAPS[j]
    local map = {}
    for _ = 1, counts[j] do
      map[got[i]] = got[i + 1]
      i = i + 2
    end
    sums[k] = map
  end
  return clock, skew, seq, born, frontier, ttl, sums
end

-- A whole number as a command's argument: Redis would format a Lua number with `%.17g`,
-- which costs twice as much here.
local function int(n)
  return string.format('%d', n)
end

-- Adds (s = 1) or takes out (s = -1) what entry `e` counts for as a host the store holds.
local function count_known(e, s)
  local er = e.report
  agg.n = agg.n + s
  agg.rt = agg.rt + s * reserved_total(e)
  agg.act = agg.act + s * er.active
  add(agg.m, er.b - 1, s * e.prev)
  add(agg.m, er.b, s * max(er.am0, e.gm0))
  add(agg.m, er.b + 1, s * max(er.am1, e.gm1))
end

-- The same for what it counts for as a present host.
local function count_present(e, s)
  local er = e.report
  agg.np = agg.np + s
  agg.tr = agg.tr + s * er.traffic
  agg.dm = agg.dm + s * er.demand
  add(agg.a, er.b, s * er.admitted)
  add(agg.c, er.b, s)
  local headroom = min(
    max(0, reserved_total(e) - er.active),
    max(0, reserved_minute(e, er.b) - er.admitted))
  local live = er.live
  if #live > 1 then
    live = {}
    for i = 1, #er.live do
      local w = er.live[i]
      live[i] = w
    end
    table.sort(live, by_bucket)
  end
  local older = 0
  for i = 1, #live do
    local w = live[i]
    add(agg.l, w[1], s * w[2])
    local uncovered = max(0, older - headroom)
    older = older + w[2]
    add(agg.u, w[1], s * (max(0, older - headroom) - uncovered))
  end
end

-- (Helpers of `sync_room` at the top level, and loops over arrays by index, not `ipairs`:
-- in Redis's Lua a closure made per call and an iterator called per element cost more than
-- the work they do, BENCHMARKS.md.)

-- `n * of / whole`, rounded down (`whole` at least 1).
local function ratio(n, of, whole)
  return floor(n * of / max(whole, 1))
end

-- (A command's arguments go in slices: Lua unpacks at most a few thousand values at once.)
local function call_in_slices(command, target, args, step)
  for i = 1, #args, step do
    redis.call(command, target, unpack(args, i, min(i + step - 1, #args)))
  end
end

-- The sum in `u_sums` up to the last bucket of `u_buckets` (in order) before `j`: waiters
-- older than `j` that their own host's allowance does not cover.
local function uncovered_before(u_buckets, u_sums, j)
  -- The last bucket before `j` (binary search).
  local lo, hi = 0, #u_buckets
  while lo < hi do
    local mid = floor((lo + hi + 1) / 2)
    if u_buckets[mid] < j then
      lo = mid
    else
      hi = mid - 1
    end
  end
  if lo == 0 then
    return 0
  end
  return u_sums[lo]
end

-- This host's waiters `live` the frontier reached, oldest first, each after the older waiters
-- elsewhere that their own host's allowance does not cover (`uncovered_before`), within
-- `limit`: how many of them a grant makes room for.
local function ready_within(live, frontier, u_buckets, u_sums, limit)
  local head = 0
  for i = 1, #live do
    local w = live[i]
    if w[1] <= frontier then
      head = head + min(w[2], max(0, limit - uncovered_before(u_buckets, u_sums, w[1]) - head))
    end
  end
  return head
end

-- One room's sync: `key`, `log` and `deadlines` its keys, `call` its [host, report, terms]
-- (the script's `raw` clock and server `identity` as read for all).
local function sync_room(key, log, deadlines, call)
  if type(call) ~= 'table' or type(call[1]) ~= 'string' or type(call[2]) ~= 'table'
      or type(call[3]) ~= 'table' then
    error({ err = 'ERR a call is [host, report, terms]' })
  end
  local name, r, p = call[1], call[2], call[3]
  local me = 'h:' .. name
  r.held = r.held or 0
  -- Revocations travel apart from the report (see the end): the entry keeps neither.
  local rev_cursor, rev_ids = r.rc, r.rv
  r.rc = nil
  r.rv = nil
  if rev_cursor ~= nil then
    -- Checked before anything is written (the log is written last).
    if type(rev_cursor) ~= 'table' or type(rev_cursor[1]) ~= 'number'
        or type(rev_cursor[2]) ~= 'number' or (rev_ids ~= nil and type(rev_ids) ~= 'table') then
      error({ err = 'ERR rc is [ms, seq] and rv a list of ids' })
    end
    local kind = redis.call('TYPE', log).ok
    if kind ~= 'stream' and kind ~= 'none' then
      error({ err = 'WRONGTYPE the room\'s log of revocations is a ' .. kind })
    end
  end

  local state = redis.call('HMGET', key, 'st', 'run', me, 'clock')
  local seen_run, mine_raw = state[2], state[3]
  -- The state's parts (`last` false and `born` nil for a room without one yet), and the
  -- sums (nil: none kept).
  local last, skew, room_seq, born_at, frontier, ttl_at, sums
  -- Whether the fields an earlier build kept are to be dropped.
  local legacy = false
  -- (Fields of an earlier build beside a record: written by that build after this one's last
  -- call, as when a host ran it again for a while. They are the newer state.)
  if state[1] and not state[4] then
    last, skew, room_seq, born_at, frontier, ttl_at, sums = decode_state(state[1])
  else
    local old = redis.call('HMGET', key, 'clock', 'skew', 'seq', 'born', 'frontier', 'agg',
      'ttl')
    last = old[1] and tonumber(old[1])
    skew = tonumber(old[2] or '0')
    room_seq = tonumber(old[3] or '0')
    born_at = old[4] and tonumber(old[4])
    frontier = tonumber(old[5] or '0')
    ttl_at = tonumber(old[7] or '0')
    if old[6] then
      sums = cmsgpack.unpack(old[6])
      -- (State a development build wrote before `dm` was kept: counted from 0.)
      sums.dm = sums.dm or 0
    end
    for i = 1, 7 do
      legacy = legacy or old[i] ~= false
    end
  end

  -- The effective clock: never back, never forward by more than a lease between two calls
  -- (see allocator.rs).
  local now
  if last == false or last == nil then
    skew = 0
    now = raw
  else
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

  -- The room's sums over its hosts (this one's taken out while it syncs): over every host the
  -- store holds an entry for, `n` of them, their reserved totals `rt`, their active visitors
  -- `act`, and their minute reservations by bucket `m`; over the hosts counted as present, `np`
  -- of them, their traffic `tr`, their admissions by bucket `a`, how many are in each bucket
  -- `c`, their live waiters by arrival bucket `l`, and `u`: by bucket, how much each bucket's
  -- waiters add to what their hosts' unused allowance does not cover (summed over buckets
  -- before `j`, the waiters older than `j` that no allowance covers).
  if sums then
    agg = sums
  else
    agg = { n = 0, rt = 0, act = 0, m = {}, np = 0, tr = 0, dm = 0, a = {}, c = {}, l = {}, u = {} }
  end

  -- Nothing is written before the answer is computed (a script that fails part-way keeps what
  -- it wrote): the members and fields that go are listed here, and go with the new entry.
  local zrem, hdel = {}, {}

  -- The set holds one `g:` member per entry and one `p:` member per host counted as present:
  -- `n + np` members. Any other count means the set or the sums were lost apart from the
  -- entries (a `DEL`, an eviction): both are counted anew from the entries, once (O(hosts)),
  -- each present while its lease runs.
  local members = redis.call('ZCARD', deadlines)
  local rebuild = members ~= agg.n + agg.np
  local mine = nil
  if mine_raw then
    mine = decode_entry(mine_raw)
  end
  if rebuild then
    agg = { n = 0, rt = 0, act = 0, m = {}, np = 0, tr = 0, dm = 0, a = {}, c = {}, l = {}, u = {} }
    local fields = redis.call('HGETALL', key)
    for i = 1, #fields, 2 do
      local f = fields[i]
      if string.sub(f, 1, 2) == 'h:' and f ~= me then
        local e = decode_entry(fields[i + 1])
        if e.gone < now then
          table.insert(hdel, f)
        else
          count_known(e, 1)
          if e.exp >= now then
            count_present(e, 1)
          end
        end
      end
    end
  else
    -- This host's old entry comes out of the sums (it is counted anew below; its deadlines are
    -- set anew then). It counts as present while its `p:` member is there.
    if mine ~= nil then
      count_known(mine, -1)
      -- (A lease that has not ended yet cannot have been processed: the clock never goes
      -- back. Only a lapsed one is looked up.)
      if mine.exp >= now or redis.call('ZSCORE', deadlines, 'p:' .. name) then
        count_present(mine, -1)
      end
    end
    -- Other hosts' lapses due, soonest first: a lease's end (it stops counting as present), a
    -- reservation's end (its entry goes). A lease ends before its reservation does: a `g:`
    -- member comes after its host's `p:`.
    -- (This host's own two members may be among them: read two more, skip them.)
    -- `nd`, kept in the sums, is at most the set's earliest deadline: while the clock has not
    -- passed it, nothing is due and the set is not read. Otherwise its first members by rank
    -- are read with their deadlines: those due, and the earliest left after them (the new
    -- `nd`; a member this call takes out only makes the true earliest later).
    local due = {}
    if agg.nd == nil or now > agg.nd then
      local first = redis.call('ZRANGE', deadlines, 0, LAPSES_PER_SYNC + 2, 'WITHSCORES')
      local nd = NO_DEADLINE
      for i = 1, #first, 2 do
        local score = tonumber(first[i + 1])
        if score < now and #due < LAPSES_PER_SYNC + 2 then
          due[#due + 1] = first[i]
        else
          nd = score
          break
        end
      end
      -- (At most a lease ahead: the set is read at least once a lease, whatever wrote the
      -- sums or the set in between.)
      agg.nd = min(nd, now + p.lease)
    end
    local ended, taken = {}, 0
    for i = 1, #due do
      local member = due[i]
      local host = string.sub(member, 3)
      if host ~= name and taken >= LAPSES_PER_SYNC then
        -- Due and left for the next call: the set is read again then.
        agg.nd = nil
      end
      if host ~= name and taken < LAPSES_PER_SYNC then
        taken = taken + 1
        local field = 'h:' .. host
        table.insert(zrem, member)
        local raw_entry = redis.call('HGET', key, field)
        if raw_entry then
          local e = decode_entry(raw_entry)
          if string.sub(member, 1, 2) == 'p:' then
            count_present(e, -1)
            ended[host] = true
          else
            if not ended[host] and redis.call('ZSCORE', deadlines, 'p:' .. host) then
              count_present(e, -1)
              table.insert(zrem, 'p:' .. host)
            end
            count_known(e, -1)
            table.insert(hdel, field)
          end
        end
      end
    end
  end

  -- Writes the store lost: another server than the one that wrote the state, a grant newer
  -- than its record, or a reservation it does not hold.
  local run = identity
  local lost = r.seq > room_seq or (run ~= '' and seen_run ~= false and seen_run ~= run)
  if mine ~= nil then
    lost = lost or r.seq > (mine.seq or 0)
  else
    lost = lost or r.held ~= 0
  end
  local born = born_at or now
  if lost then
    born = now
  end
  local learning = now - born < max(p.lease, p.learn or 0) + p.lease
  local seq = max(room_seq, r.seq) + 1
  -- A report older than the last grant to its host: computed on the store's newer record of
  -- the host, and answered with what the store already reserves for it.
  local stale = nil
  local incoming = r
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

  -- The other hosts, from the sums.
  local others = agg.rt
  local om0 = agg.m[r.b] or 0
  local om1 = agg.m[r.b + 1] or 0
  local occupied = r.active + agg.act
  local admitted = r.admitted + (agg.a[r.b] or 0)
  local traffic = r.traffic + agg.tr
  local hosts, known, oldest_bucket = 1 + agg.np, 1 + agg.n, r.b
  for b, _ in pairs(agg.c) do
    oldest_bucket = min(oldest_bucket, b)
  end
  local live = {}
  for b, n in pairs(agg.l) do
    live[b] = n
  end
  for i = 1, #r.live do
    local w = r.live[i]
    if w[2] ~= 0 then
      live[w[1]] = (live[w[1]] or 0) + w[2]
    end
  end

  -- The frontier moves over arrival buckets, oldest first, while the waiters it lets in fit in
  -- the room's free slots; past everyone when they all fit, but never past the oldest bucket a
  -- present host is in (a host whose clock runs ahead cannot drag it).
  local free = max(0, min(p.total - occupied, p.minute - admitted))
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
  for i = 1, #buckets do
    local b = buckets[i]
    if b > frontier then
      if ready >= free then
        break
      end
      frontier = b
      ready = ready + live[b]
    end
  end
  if ready < free then
    frontier = max(frontier, oldest_bucket)
  end
  local behind = queued - min(ready, queued)
  local own_ready, own_queued = 0, 0
  for i = 1, #r.live do
    local w = r.live[i]
    own_queued = own_queued + w[2]
    if w[1] <= frontier then
      own_ready = own_ready + w[2]
    end
  end
  local own_behind = own_queued - own_ready
  -- Waiters of other hosts, older than bucket `j`, that their own host's unused allowance does
  -- not cover: slots for them come first (the sums of `u` over the buckets before `j`).
  local u_buckets = {}
  for b, _ in pairs(agg.u) do
    table.insert(u_buckets, b)
  end
  table.sort(u_buckets)
  local u_sums = {}
  local uncovered = 0
  for i = 1, #u_buckets do
    local b = u_buckets[i]
    uncovered = uncovered + agg.u[b]
    u_sums[i] = uncovered
  end
  local room_total = max(0, p.total - others - r.active)

  -- This host's waiters the frontier reached, oldest first, each after the older waiters
  -- elsewhere; then its chunk and share of what is free for new arrivals (below). One headroom
  -- per bucket, within both limits.
  local ready_head = ready_within(r.live, frontier, u_buckets, u_sums, room_total)
  -- The free slots are handed out once on paper: the waiters' first, then every present host's
  -- chunk (scaled down when they ask for more than is left), then the rest, half evenly (a
  -- quiet host is not starved) and half by traffic (evenly when nobody had any).
  local demand = r.demand + agg.dm
  local spare = max(0, free - queued)
  local share, chunk
  if demand > spare then
    share, chunk = 0, ratio(spare, r.demand, demand)
  elseif traffic == 0 then
    share, chunk = floor((spare - demand) / hosts), r.demand
  else
    local rest = spare - demand
    local half = floor(rest / 2)
    share, chunk = floor(half / hosts) + ratio(rest - half, r.traffic, traffic), r.demand
  end
  -- New arrivals get nothing while anyone waits behind the frontier; the slots for waiters
  -- elsewhere that their own host's allowance does not cover are left to them.
  local newcomers = 0
  if behind == 0 then
    newcomers = min(share + chunk, max(0, room_total - uncovered - ready_head))
  end
  -- Each bucket's admissions, too, leave the uncovered waiters theirs (a waiter let in needs
  -- both: a host's claims are bounded by its allowance for the next bucket as well).
  local m0 = max(0, p.minute - om0 - r.admitted)
  local m1 = max(0, p.minute - om1)
  -- The ready waiters are counted within each bucket's room as well: older uncovered waiters
  -- elsewhere come before them there too.
  local ready0, ready1 = ready_head, ready_head
  if m0 < room_total then
    ready0 = ready_within(r.live, frontier, u_buckets, u_sums, m0)
  end
  if m1 < room_total then
    ready1 = ready_within(r.live, frontier, u_buckets, u_sums, m1)
  end
  local head0 = min(ready0 + min(newcomers, max(0, m0 - uncovered - ready0)), room_total, m0)
  local head1 = min(ready1 + min(newcomers, max(0, m1 - uncovered - ready1)), room_total, m1)
  local gt = r.active + max(head0, head1)
  local gm0 = r.admitted + head0
  local gm1 = head1
  if learning then
    gt = min(gt, r.at)
    gm0 = min(gm0, r.am0)
    gm1 = min(gm1, r.am1)
  end
  -- What the reply grants; the entry keeps what the store reserves.
  local agt, agm0, agm1 = gt, gm0, gm1
  if stale ~= nil then
    gt = max(stale.report.at, stale.gt)
    gm0 = reserved_minute(stale, r.b)
    gm1 = reserved_minute(stale, r.b + 1)
    agt, agm0, agm1 = gt, gm0, gm1
    if learning then
      -- The store's record may hold a grant computed on a state that lost writes (one the
      -- host never applied): while it learns, the host gets no more than its own report
      -- says it holds.
      local function held(b)
        if b == incoming.b then
          return incoming.am0
        elseif b == incoming.b + 1 then
          return incoming.am1
        end
        return 0
      end
      agt = min(gt, incoming.at)
      agm0 = min(gm0, held(r.b))
      agm1 = min(gm1, held(r.b + 1))
    end
  end

  local entry = {
    report = r, gt = gt, gm0 = gm0, gm1 = gm1, prev = prev, seq = seq,
    exp = now + p.lease, gone = now + p.lease + p.hold + p.lease,
  }
  count_known(entry, 1)
  count_present(entry, 1)
  if agg.nd ~= nil then
    agg.nd = min(agg.nd, entry.exp)
  end
  local keep = 2 * (p.lease + p.hold + p.lease)
  -- The keys' expiry is pushed back once a lease (on the server's own clock): they outlive the
  -- last sync by at least `keep` less a lease, which is more than a lease and a hold longer
  -- than any host's reservation. A set made anew (emptied here, or counted anew) gets its
  -- expiry at once.
  local push = abs(raw - ttl_at) >= p.lease
  -- (Encoded before anything is written: one that fails leaves the room as it was.)
  local st = encode_state(now, skew, seq, born, frontier, push and raw or ttl_at)
  local record = encode_entry(entry)
  if rebuild then
    redis.call('DEL', deadlines)
  else
    call_in_slices('ZREM', deadlines, zrem, 1000)
  end
  if legacy then
    for _, f in ipairs({ 'clock', 'skew', 'seq', 'born', 'frontier', 'agg', 'ttl' }) do
      hdel[#hdel + 1] = f
    end
  end
  call_in_slices('HDEL', key, hdel, 1000)
  if run ~= '' then
    redis.call('HSET', key, me, record, 'st', st, 'run', run)
  else
    redis.call('HSET', key, me, record, 'st', st)
  end
  local deadline_args = { int(entry.exp), 'p:' .. name, int(entry.gone), 'g:' .. name }
  if rebuild then
    -- Every entry's deadlines, from the hash as it now stands.
    local all = redis.call('HGETALL', key)
    for i = 1, #all, 2 do
      local f = all[i]
      if string.sub(f, 1, 2) == 'h:' and f ~= me then
        local e = decode_entry(all[i + 1])
        local host = string.sub(f, 3)
        table.insert(deadline_args, int(e.gone))
        table.insert(deadline_args, 'g:' .. host)
        if e.exp >= now then
          table.insert(deadline_args, int(e.exp))
          table.insert(deadline_args, 'p:' .. host)
        end
      end
    end
  end
  call_in_slices('ZADD', deadlines, deadline_args, 1000)
  if push or rebuild or members - #zrem == 0 then
    redis.call('PEXPIRE', deadlines, keep)
  end
  if push then
    redis.call('PEXPIRE', key, keep)
  end

  -- Revocations (rooms whose sessions the origin may revoke send a cursor): the host's are
  -- appended to the room's log (a stream, `log`, trimmed to what is younger than the room's
  -- state is kept), and the other hosts' after its cursor go back (at most 4096; the rest with
  -- the next syncs). The same steps as `relay_revocations` in allocator.rs.
  local rc_out = nil
  local rv_out = nil
  if rev_cursor ~= nil and log ~= nil then
    if rev_ids ~= nil then
      for i = 1, #rev_ids do
        local id = rev_ids[i]
        redis.call('XADD', log, 'MINID', '~', string.format('%.0f', max(raw - keep, 0)), '*',
          'i', id, 'h', name)
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
    for i = 1, #got do
      local e = got[i]
      local ms, sq = string.match(e[1], '^(%d+)-(%d+)$')
      rc_out = { tonumber(ms), tonumber(sq) }
      local f = {}
      for i = 1, #e[2], 2 do
        f[e[2][i]] = e[2][i + 1]
      end
      if f.h ~= name and f.i ~= nil then
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

  -- The reply's fields in order (a MessagePack array: cheaper to pack than a map), `rc` and
  -- `rv` last (absent without a cursor; `rv` only ever with `rc`).
  return {
    seq, agt, r.b, agm0, agm1, frontier, behind - min(own_behind, behind), hosts,
    known, learning and 1 or 0, free, queued, stale ~= nil and 1 or 0, rc_out, rv_out,
  }
end

local calls = cmsgpack.unpack(ARGV[1])
local answers = {}
for i = 1, #calls do
  local c = calls[i]
  local k = 3 * (i - 1)
  local ok, answer = pcall(sync_room, KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], c)
  if ok then
    answers[i] = cmsgpack.pack(answer)
  else
    -- (Errors reach pcall as strings; one that starts with a code keeps it: `READONLY`,
    -- `WRONGTYPE`, `OOM`.)
    local message = type(answer) == 'table' and answer.err or tostring(answer)
    if not string.find(message, '^%u[%u_]+ ') then
      message = 'ERR ' .. message
    end
    answers[i] = { err = message }
  end
end
return answers
