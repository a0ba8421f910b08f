//! The seed's divisions in the simulated world (see [`Sharing`]): at each of its syncs a host
//! publishes its figures (its engines', host-wide in their shared counters), reads what every
//! other host published at its own last sync, takes its part of the room's free seats and
//! admissions, and reloads its processes' engines with the limits that gives it (at least one
//! seat and one admission: a room's limits are never 0). No store is involved.

use velvet_rope::Config;

use super::{host_config, World, ROOM};
use crate::sim::{Scenario, Sharing};

/// Each host's limits before any sync: its part of an empty room (`None` for the store's way).
pub(super) fn first_limits(s: &Scenario) -> Option<(u64, u64)> {
    if s.sharing == Sharing::Store {
        return None;
    }
    let hosts = s.hosts as u64;
    Some((
        s.sharing.part(s.total, hosts, 0, s.total).clamp(1, s.total),
        s.sharing
            .part(s.per_minute, hosts, 0, s.total)
            .clamp(1, s.per_minute),
    ))
}

impl World {
    /// Host `h`'s sync under a division: process 0 decides for the host (its processes share
    /// its counters, so they share its limits too).
    pub(super) fn share_round(&mut self, h: usize, p: usize) {
        if p != 0 {
            return;
        }
        // It publishes its own figures (host-wide, in its shared counters), and reads what
        // the others published at their last syncs.
        let engine = self.hosts[h]
            .processes
            .iter()
            .find_map(|q| q.engine.clone().filter(|_| q.alive));
        let own = engine
            .and_then(|e| e.stats(ROOM).ok())
            .map_or((0, 0), |s| (s.active_users, s.admitted_this_minute));
        if self.published.len() != self.hosts.len() {
            self.published = vec![(0, 0); self.hosts.len()];
        }
        self.published[h] = own;
        let figures = self.published.clone();
        let (total, per_minute) = self.limits_in_force();
        let active: u64 = figures.iter().map(|f| f.0).sum();
        let minute: u64 = figures.iter().map(|f| f.1).sum();
        let free = total.saturating_sub(active);
        let free_minute = per_minute.saturating_sub(minute);
        let hosts = self.hosts.len() as u64;
        let part = self.s.sharing.part(free, hosts, active, total);
        let part_minute = self.s.sharing.part(free_minute, hosts, active, total);
        let limits = (
            (figures[h].0 + part).clamp(1, total),
            (figures[h].1 + part_minute).clamp(1, per_minute),
        );
        let Ok(config) = Config::from_text(&host_config(&self.s, h, Some(limits))) else {
            return;
        };
        let now = self.host_now(h);
        for q in 0..self.hosts[h].processes.len() {
            let proc = &self.hosts[h].processes[q];
            let Some(engine) = proc.engine.clone().filter(|_| proc.alive) else {
                continue;
            };
            let _installed = velvet_rope::simulation::install(proc.hooks.clone());
            if engine.reload(config.clone()).is_ok() {
                engine.tick(now);
            }
        }
    }
}
