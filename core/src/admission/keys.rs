//! Which keys seal and open an engine's tickets.

use std::sync::Arc;

use crate::admission::storage::Storage;
use crate::config::Config;
use crate::error::Result;
use crate::ticket::Keyring;

/// The keyring for `config`: its configured keys; with none, the key shared through the
/// storage's region, or this engine's own random key. An ephemeral keyring is kept across
/// reloads (tickets already handed out stay valid); configured keys are never kept once the
/// configuration drops them.
pub(crate) fn keyring_for(
    config: &Config,
    previous: Option<&Arc<Keyring>>,
    storage: &Storage,
) -> Result<Arc<Keyring>> {
    if let Some(configured) = config.tickets.keyring()? {
        return Ok(Arc::new(configured));
    }
    if let Some(prev) = previous.filter(|k| k.is_ephemeral()) {
        return Ok(prev.clone());
    }
    Ok(Arc::new(match storage.shared_key()? {
        Some(key) => Keyring::from_shared_key(key)?,
        None => Keyring::ephemeral()?,
    }))
}
