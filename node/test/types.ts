// Compiled with `tsc --noEmit` in `make test`: the hand-written `index.d.ts` describes the
// package as a TypeScript user calls it.
import * as velvetRope from '..'
import { CapacityError, Engine, Gauge, RateLimiter, Room, type Decision, type Page } from '..'

const engine = new Engine('[[rooms]]', { sharedMemory: '/tmp/rooms.state' })
const d: Decision = engine.admit('shop', undefined)
if (!d.admitted) {
  const page: Page | null = engine.renderPage('shop', d, 'text/html')
  const status: number | undefined = page?.status
  void status
}
const shop: Room = engine.room('shop')
const again: Decision = shop.admit(undefined, 1_800_000_000_000)
const shopPage: Page | null = shop.renderPage(again, null)
const shopName: string = shop.name
void shopPage
void shopName
const outcome: 'admit' | 'queue' | 'reject' = d.outcome
const position: number | undefined = d.position
void outcome
void position
engine.startTicking(500).stopTicking()
const active: number = engine.stats('shop').activeUsers

async function leases (): Promise<number> {
  const limiter = new RateLimiter(100)
  const now: boolean = limiter.tryAcquire()
  await limiter.acquire(2)
  const gauge = new Gauge(4)
  {
    using permit = await gauge.acquire()
    void permit
  }
  const n: number = await gauge.withPermit(async () => 3)
  return n + (now ? 1 : 0) + active
}
void leases

const revoked: velvetRope.Revocation = engine.revokeRequest('shop', { cookie: 'a=1', ticketHeader: null, issued: d.ticket })
const ended: boolean = revoked === 'revoked' || engine.revoke('shop', 'ticket', 1_800_000_000_000) === 'already_revoked'
const clear: string = engine.clearCookie('shop')
const asks: boolean = velvetRope.isRevokeCommand(['x', 'revoke']) && velvetRope.COMMAND_HEADER === 'Velvet-Rope-Command'
void ended
void clear
void asks
const middleware = velvetRope.express(engine, { rooms: { '/shop': 'shop' }, bypass: ['/health'], caseSensitive: true })
void middleware
const e: Error = new CapacityError()
void e

// Metrics: the text, the families, and the prom-client helpers.
const metricsText: string = engine.metricsText()
const families: velvetRope.MetricFamily[] = engine.metrics()
const firstSample: number | undefined = families[0]?.samples[0]?.value
const kind: 'gauge' | 'counter' | 'histogram' | undefined = families[0]?.type
void metricsText
void firstSample
void kind
declare const registry: velvetRope.PromRegistry
const registered: string[] = velvetRope.prometheus.register(engine, registry)
const expressMetrics = velvetRope.prometheus.express(engine, { registry })
const fastifyMetrics = velvetRope.prometheus.fastify(engine)
const contentType: string = velvetRope.prometheus.CONTENT_TYPE
void registered
void expressMetrics
void fastifyMetrics
void contentType

const coordinator = new velvetRope.Coordinator('[[resources]]', { emitEvents: false })
coordinator.on('event', (e: velvetRope.EngineEvent) => { void e.fields })
const learning: string[] = coordinator.drainEvents(1_800_000_000_000).map((e) => e.event)
void learning
