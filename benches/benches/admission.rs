//! Admission benches: the per-request paths, at 1 and 2 threads.
//!
//! `cargo bench -p velvet-rope-benches --bench admission`. Figures go to BENCHMARKS.md.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use velvet_rope::slot_pool::OwnedSlotPool;
use velvet_rope::ticket::{Keyring, RoomId, Ticket, TicketState};
use velvet_rope::{Engine, Outcome};
use velvet_rope_benches::{on_threads, KEYS, T0};

const ROOMS: &str = r#"

[[rooms]]
name = "shop"
total_active_users = 100000
new_users_per_minute = 4000000000
session_duration = 5
"#;

fn admitted_cookie(engine: &Engine) -> String {
    let d = engine.admit("shop", None, T0).unwrap();
    assert_eq!(d.outcome, Outcome::Admit);
    d.set_cookie.unwrap().split(';').next().unwrap().to_owned()
}

fn admission(c: &mut Criterion) {
    let mut g = c.benchmark_group("admission");
    g.throughput(Throughput::Elements(1));
    let config = format!("{KEYS}{ROOMS}");
    let engine = Engine::from_text(&config, T0).unwrap();
    let cookie = admitted_cookie(&engine);
    for threads in [1usize, 2] {
        g.bench_with_input(
            BenchmarkId::new("admit_valid_ticket_no_reissue", threads),
            &threads,
            |b, &t| {
                b.iter_custom(|iters| {
                    on_threads(t, iters, || {
                        let d = engine
                            .admit("shop", Some(black_box(&cookie)), T0 + 1)
                            .unwrap();
                        debug_assert!(d.set_cookie.is_none());
                        black_box(d);
                    })
                })
            },
        );
    }
    // Cold: 4,096 visitors in turn, more than a thread's cache of 256 opened tickets, so every
    // call pays for base64 and the AEAD.
    let many: Vec<String> = (0..4096).map(|_| admitted_cookie(&engine)).collect();
    for threads in [1usize, 2] {
        g.bench_with_input(
            BenchmarkId::new("admit_valid_ticket_cold", threads),
            &threads,
            |b, &t| {
                b.iter_custom(|iters| {
                    let next = std::sync::atomic::AtomicUsize::new(0);
                    on_threads(t, iters, || {
                        let i =
                            next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % many.len();
                        black_box(engine.admit("shop", Some(&many[i]), T0 + 1).unwrap());
                    })
                })
            },
        );
    }
    // A ticket counted in the previous minute: every call renews it (move guard + new ticket).
    let old = admitted_cookie(&engine);
    engine.tick(T0 + 60_000);
    for threads in [1usize, 2] {
        g.bench_with_input(
            BenchmarkId::new("admit_with_reissue", threads),
            &threads,
            |b, &t| {
                b.iter_custom(|iters| {
                    on_threads(t, iters, || {
                        let d = engine
                            .admit("shop", Some(black_box(&old)), T0 + 60_001)
                            .unwrap();
                        debug_assert!(d.set_cookie.is_some());
                        black_box(d);
                    })
                })
            },
        );
    }
    // New visitors: a room of a million, replaced (untimed) whenever a sample could run it
    // out of slots, so every call claims a slot and is issued a ticket.
    let big = config.replace("= 100000", "= 1000000");
    let mut room = Engine::from_text(&big, T0).unwrap();
    let mut used = 0u64;
    for threads in [1usize, 2] {
        g.bench_with_input(
            BenchmarkId::new("admit_new_visitor", threads),
            &threads,
            |b, &t| {
                b.iter_custom(|iters| {
                    // Timed in chunks that fit a room; making a new room is not timed.
                    let mut total = Duration::ZERO;
                    let mut left = iters;
                    while left > 0 {
                        let chunk = left.min(400_000 / t as u64);
                        if used + chunk * t as u64 >= 1_000_000 {
                            room = Engine::from_text(&big, T0).unwrap();
                            used = 0;
                        }
                        used += chunk * t as u64;
                        let room = &room;
                        total += on_threads(t, chunk, || {
                            let d = room.admit("shop", None, T0 + 2).unwrap();
                            debug_assert_eq!(d.outcome, Outcome::Admit);
                            black_box(d);
                        });
                        left -= chunk;
                    }
                    total
                })
            },
        );
    }
    g.finish();
}

fn slot_claim(c: &mut Criterion) {
    let mut g = c.benchmark_group("slot_claim");
    g.throughput(Throughput::Elements(1));
    for threads in [1usize, 2] {
        let pool = OwnedSlotPool::new(4);
        g.bench_with_input(
            BenchmarkId::new("sharded_pool", threads),
            &threads,
            |b, &t| {
                b.iter_custom(|iters| {
                    pool.revoke(u64::MAX);
                    pool.grant(iters * t as u64 + 1);
                    on_threads(t, iters, || {
                        black_box(pool.try_claim());
                    })
                })
            },
        );
        // The same claim on one shared atomic: what sharding is measured against.
        let single = OwnedSlotPool::new(1);
        g.bench_with_input(
            BenchmarkId::new("single_atomic", threads),
            &threads,
            |b, &t| {
                b.iter_custom(|iters| {
                    single.revoke(u64::MAX);
                    single.grant(iters * t as u64 + 1);
                    on_threads(t, iters, || {
                        black_box(single.try_claim());
                    })
                })
            },
        );
    }
    g.finish();
}

/// A base64 engine decoding into a stack buffer (object-safe, so engines share a loop).
trait DecodeSlice {
    fn decode(&self, text: &[u8]) -> usize;
}

impl<E: base64::Engine> DecodeSlice for E {
    #[inline]
    fn decode(&self, text: &[u8]) -> usize {
        let mut out = [0u8; 96];
        self.decode_slice_unchecked(text, &mut out).unwrap_or(0)
    }
}

fn tickets(c: &mut Criterion) {
    let mut g = c.benchmark_group("ticket");
    g.throughput(Throughput::Elements(1));
    let keys = Keyring::new(&[(1, [7; 32])], None).unwrap();
    let shop = RoomId::new("shop");
    let t = Ticket {
        id: 42,
        state: TicketState::Admitted,
        arrival: 0,
        accepted_at: 1_800_000_000,
        counted: 1,
        last_checkin: 1_800_000_000,
        expires: 1_800_000_600,
        incarnation: 9,
    };
    let sealed = keys.seal(&shop, &t).as_str().to_owned();
    g.bench_function("encode", |b| {
        b.iter(|| black_box(keys.seal(&shop, black_box(&t))))
    });
    // Distinct tickets in turn, so the per-thread cache of opened tickets never hits.
    let sealed_many: Vec<String> = (0..4096u64)
        .map(|id| keys.seal(&shop, &Ticket { id, ..t }).as_str().to_owned())
        .collect();
    let mut i = 0;
    g.bench_function("decode_cold", |b| {
        b.iter(|| {
            i = (i + 1) % sealed_many.len();
            black_box(
                keys.open(black_box(&sealed_many[i]), &shop, 1_800_000_001, 30)
                    .unwrap(),
            )
        })
    });
    // The base64url decode alone over the same distinct tickets: the `base64` crate's scalar
    // and SIMD engines, and `base64-simd` (what tickets use).
    let scalar = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let simd = base64::engine::simd::Simd::url_safe(base64::engine::general_purpose::NO_PAD);
    for (name, engine) in [
        ("base64_decode_scalar", &scalar as &dyn DecodeSlice),
        ("base64_decode_simd", &simd as &dyn DecodeSlice),
    ] {
        let mut i = 0;
        g.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 1) % sealed_many.len();
                black_box(engine.decode(black_box(sealed_many[i].as_bytes())))
            })
        });
    }
    let mut i = 0;
    g.bench_function("base64_decode_base64_simd", |b| {
        b.iter(|| {
            i = (i + 1) % sealed_many.len();
            let mut out = [0u8; 96];
            let text = black_box(sealed_many[i].as_bytes());
            let n = base64_simd::URL_SAFE_NO_PAD
                .decode(text, base64_simd::Out::from_slice(&mut out[..70]))
                .map(|d| d.len());
            black_box(n)
        })
    });
    // The AEAD alone: opening a ticket's body and tag with its header and room name as
    // associated data. AEGIS-256 (what tickets use) in format 3's shapes (a 32-byte body,
    // associated data padded to a 16-byte block) and in format 2's (a 33-byte body, 10 bytes
    // of associated data), against ring's AES-GCM and ChaCha20-Poly1305 and RustCrypto's
    // aes-gcm in format 2's shapes, same key and bytes.
    for (name, body_len, aad) in [
        (
            "aead_open_aegis256",
            32,
            &b"\x03\x01\x10\x20\x30\x40\x04shop\0\0\0\0\0"[..],
        ),
        (
            "aead_open_aegis256_format_2_shapes",
            33,
            &b"\x02\x01\x10\x20\x30\x40shop"[..],
        ),
    ] {
        let (key, nonce) = ([7u8; 32], [3u8; 32]);
        let mut sealed = [9u8; 33];
        let tag = aegis::aegis256::Aegis256::<16>::new(&key, &nonce)
            .encrypt_in_place(&mut sealed[..body_len], aad);
        g.bench_function(name, |b| {
            b.iter(|| {
                let mut buf = black_box(sealed);
                let ok = aegis::aegis256::Aegis256::<16>::new(&key, black_box(&nonce))
                    .decrypt_in_place(&mut buf[..body_len], &tag, aad)
                    .is_ok();
                assert!(ok);
                black_box(buf)
            })
        });
    }
    {
        use aes_gcm::aead::AeadInPlace;
        use aes_gcm::KeyInit;
        let key = [7u8; 32];
        let nonce = [3u8; 12];
        let aad = *b"\x02\x01\x10\x20\x30\x40shop";
        // Sealed with ring's `alg` and the key's first `key_len` bytes: the key and the bytes.
        let seal = |alg: &'static ring::aead::Algorithm, key_len: usize| {
            let k = ring::aead::LessSafeKey::new(
                ring::aead::UnboundKey::new(alg, &key[..key_len]).unwrap(),
            );
            let mut sealed = [9u8; 33 + 16];
            let tag = k
                .seal_in_place_separate_tag(
                    ring::aead::Nonce::assume_unique_for_key(nonce),
                    ring::aead::Aad::from(&aad),
                    &mut sealed[..33],
                )
                .unwrap();
            sealed[33..].copy_from_slice(tag.as_ref());
            (k, sealed)
        };
        for (name, alg, key_len) in [
            ("aead_open_ring", &ring::aead::AES_256_GCM, 32),
            (
                "aead_open_ring_chacha20_poly1305",
                &ring::aead::CHACHA20_POLY1305,
                32,
            ),
            ("aead_open_ring_aes128_gcm", &ring::aead::AES_128_GCM, 16),
        ] {
            let (k, sealed) = seal(alg, key_len);
            g.bench_function(name, |b| {
                b.iter(|| {
                    let mut buf = black_box(sealed);
                    let n = k
                        .open_in_place(
                            ring::aead::Nonce::assume_unique_for_key(nonce),
                            ring::aead::Aad::from(&aad),
                            &mut buf,
                        )
                        .map(|p| p.len());
                    black_box((n, buf))
                })
            });
        }
        let (_, sealed) = seal(&ring::aead::AES_256_GCM, 32);
        let rc = aes_gcm::Aes256Gcm::new((&key).into());
        g.bench_function("aead_open_aes_gcm", |b| {
            b.iter(|| {
                let mut buf = black_box(sealed);
                let (body, tag) = buf.split_at_mut(33);
                let ok = rc
                    .decrypt_in_place_detached((&nonce).into(), &aad, body, (&*tag).into())
                    .is_ok();
                assert!(ok);
                black_box(buf)
            })
        });
    }
    g.bench_function("decode_cached", |b| {
        b.iter(|| {
            black_box(
                keys.open(black_box(&sealed), &shop, 1_800_000_001, 30)
                    .unwrap(),
            )
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = admission, slot_claim, tickets
}
criterion_main!(benches);
