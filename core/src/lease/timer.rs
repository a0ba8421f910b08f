//! An executor-agnostic sleep: one background timer thread wakes the futures' wakers.
//!
//! Used by the async `acquire` of [`RateLimiter`](super::RateLimiter) and
//! [`Gauge`](super::Gauge) so they work under tokio, async-std, smol or a hand-written
//! executor alike. Not on any hot path (it allocates and locks).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

struct Entry {
    deadline: Instant,
    seq: u64,
    waker: Waker,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.deadline, self.seq) == (other.deadline, other.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.deadline, self.seq).cmp(&(other.deadline, other.seq))
    }
}

#[derive(Default)]
struct Queue {
    heap: BinaryHeap<Reverse<Entry>>,
    seq: u64,
}

struct Timer {
    queue: Mutex<Queue>,
    cv: Condvar,
}

fn timer() -> Option<&'static Arc<Timer>> {
    static TIMER: OnceLock<Option<Arc<Timer>>> = OnceLock::new();
    TIMER
        .get_or_init(|| {
            let t = Arc::new(Timer {
                queue: Mutex::new(Queue::default()),
                cv: Condvar::new(),
            });
            let worker = Arc::clone(&t);
            std::thread::Builder::new()
                .name("velvet-rope-timer".into())
                .spawn(move || run(&worker))
                .ok()
                .map(|_| t)
        })
        .as_ref()
}

fn run(t: &Timer) {
    let mut q = t.queue.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let now = Instant::now();
        while q.heap.peek().is_some_and(|Reverse(e)| e.deadline <= now) {
            if let Some(Reverse(e)) = q.heap.pop() {
                e.waker.wake();
            }
        }
        q = match q.heap.peek().map(|Reverse(e)| e.deadline) {
            Some(d) => {
                t.cv.wait_timeout(q, d.saturating_duration_since(now))
                    .unwrap_or_else(|e| e.into_inner())
                    .0
            }
            None => t.cv.wait(q).unwrap_or_else(|e| e.into_inner()),
        };
    }
}

/// A future that completes after a duration, on any executor.
#[derive(Debug)]
pub struct Sleep {
    deadline: Instant,
}

/// Sleeps for `duration` without blocking the executor.
pub fn sleep(duration: Duration) -> Sleep {
    Sleep {
        deadline: Instant::now() + duration,
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.deadline {
            return Poll::Ready(());
        }
        let Some(t) = timer() else {
            // No timer thread could be started: degrade to a blocking sleep, never hang.
            std::thread::sleep(self.deadline.saturating_duration_since(Instant::now()));
            return Poll::Ready(());
        };
        let mut q = t.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.seq += 1;
        let seq = q.seq;
        q.heap.push(Reverse(Entry {
            deadline: self.deadline,
            seq,
            waker: cx.waker().clone(),
        }));
        drop(q);
        t.cv.notify_one();
        Poll::Pending
    }
}
