-- velvet-rope cluster tier: one host's sync of one room, atomically (the same steps, in the
-- same order, as `allocate` in allocator.rs; tests/stores_agree.rs holds the two to the same
-- answers).
--
-- KEYS[1]  the room's hash: fields `born`, `frontier`, and `h:<host>` (JSON entries)
-- ARGV[1]  the host's id
-- ARGV[2]  its report (JSON: b, active, admitted, traffic, demand, at, am0, am1, live)
-- ARGV[3]  the room's limits and lease terms (JSON: total, minute, lease, hold)
-- Returns the reply (JSON: gt, b, gm0, gm1, frontier, behind, hosts, learning, free).

local key = KEYS[1]
local me = 'h:' .. ARGV[1]
local r = cjson.decode(ARGV[2])
local p = cjson.decode(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

redis.call('HSETNX', key, 'born', now)
local born = tonumber(redis.call('HGET', key, 'born'))
local learning = now - born < p.lease
local frontier = tonumber(redis.call('HGET', key, 'frontier') or '0')

local function reserved_minute(e, b)
  local er = e.report
  if er.b == b then
    return math.max(er.am0, e.gm0)
  elseif er.b + 1 == b then
    return math.max(er.am1, e.gm1)
  end
  return 0
end

local others, om0, om1 = 0, 0, 0
local occupied, admitted, traffic = r.active, r.admitted, r.traffic
local live = {}
local hosts = 1
local fields = redis.call('HGETALL', key)
for i = 1, #fields, 2 do
  local f = fields[i]
  if string.sub(f, 1, 2) == 'h:' and f ~= me then
    local e = cjson.decode(fields[i + 1])
    if e.gone < now then
      redis.call('HDEL', key, f)
    else
      local er = e.report
      others = others + math.max(er.at, e.gt)
      om0 = om0 + reserved_minute(e, r.b)
      om1 = om1 + reserved_minute(e, r.b + 1)
      occupied = occupied + er.active
      if e.exp >= now then
        hosts = hosts + 1
        if er.b == r.b then
          admitted = admitted + er.admitted
        end
        traffic = traffic + er.traffic
        for _, w in ipairs(er.live) do
          live[w[1]] = (live[w[1]] or 0) + w[2]
        end
      end
    end
  end
end
for _, w in ipairs(r.live) do
  live[w[1]] = (live[w[1]] or 0) + w[2]
end

-- The frontier moves over arrival buckets, oldest first, while the waiters it lets in fit in
-- the room's free slots; past everyone when they all fit.
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
  frontier = math.max(frontier, r.b)
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

-- This host's share of the free slots follows its traffic (evenly when nobody had any), plus
-- the chunk it asks for; new arrivals get none while anyone waits behind the frontier.
local share
if traffic == 0 then
  share = math.floor(free / hosts)
else
  share = math.floor(free * r.traffic / traffic)
end
local want = own_ready
if behind == 0 then
  want = want + share + r.demand
end
local gt = math.max(0, math.min(r.active + want, p.total - others))
local gm0 = math.max(0, math.min(r.admitted + want, p.minute - om0))
local gm1 = math.max(0, math.min(want, p.minute - om1))
if learning then
  gt = math.min(gt, r.at)
  gm0 = math.min(gm0, r.am0)
  gm1 = math.min(gm1, r.am1)
end

local entry = {
  report = r, gt = gt, gm0 = gm0, gm1 = gm1,
  exp = now + p.lease, gone = now + p.lease + p.hold,
}
redis.call('HSET', key, me, cjson.encode(entry), 'frontier', frontier)
redis.call('PEXPIRE', key, 2 * (p.lease + p.hold))

local own_behind_c = math.min(own_behind, behind)
return cjson.encode({
  gt = gt, b = r.b, gm0 = gm0, gm1 = gm1, frontier = frontier,
  behind = behind - own_behind_c, hosts = hosts,
  learning = learning and 1 or 0, free = free,
})
