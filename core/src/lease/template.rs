//! Resource templates and their lookup: exact identifier first, then globs in order.

use rustc_hash::FxHashMap;

use super::config::{LeaseConfig, ResourceTemplate};
use super::error::LeaseError;

/// Whether `glob` has a wildcard (`*` or `?`).
fn is_glob(glob: &str) -> bool {
    glob.contains(['*', '?'])
}

/// Matches `text` against `glob`: `*` is any run of characters (also empty), `?` exactly one.
/// Linear backtracking on the last `*`; no allocation.
pub fn glob_match(glob: &str, text: &str) -> bool {
    let g = glob.as_bytes();
    let t = text.as_bytes();
    let (mut gi, mut ti) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if gi < g.len() && g[gi] == b'*' {
            star = Some((gi, ti));
            gi += 1;
        } else if gi < g.len() && (g[gi] == t[ti] || (g[gi] == b'?' && char_start(t, ti))) {
            if g[gi] == b'?' {
                ti += utf8_len(t[ti]);
            } else {
                ti += 1;
            }
            gi += 1;
        } else if let Some((sg, st)) = star {
            let next = st + utf8_len(t[st]);
            star = Some((sg, next));
            gi = sg + 1;
            ti = next;
        } else {
            return false;
        }
    }
    g[gi..].iter().all(|&c| c == b'*')
}

fn char_start(t: &[u8], i: usize) -> bool {
    t[i] & 0xC0 != 0x80
}

fn utf8_len(first: u8) -> usize {
    match first {
        0xF0..=0xFF => 4,
        0xE0..=0xEF => 3,
        0xC0..=0xDF => 2,
        _ => 1,
    }
}

/// A validated, indexed list of templates.
#[derive(Debug, Clone, Default)]
pub struct TemplateSet {
    templates: Vec<ResourceTemplate>,
    exact: FxHashMap<String, usize>,
    globs: Vec<usize>,
}

impl TemplateSet {
    /// Validates and indexes the templates of `config`.
    pub fn new(config: &LeaseConfig) -> Result<Self, LeaseError> {
        Self::from_templates(config.resources.clone())
    }

    /// Validates and indexes a list of templates.
    pub fn from_templates(templates: Vec<ResourceTemplate>) -> Result<Self, LeaseError> {
        LeaseConfig::validate_templates(&templates)?;
        let mut exact = FxHashMap::default();
        let mut globs = Vec::new();
        for (i, t) in templates.iter().enumerate() {
            if is_glob(&t.identifier_glob) {
                globs.push(i);
            } else {
                exact.entry(t.identifier_glob.clone()).or_insert(i);
            }
        }
        Ok(Self {
            templates,
            exact,
            globs,
        })
    }

    /// The template for `resource`: an exact identifier wins, then the first matching glob.
    /// No match is an error, never silent unlimited capacity.
    pub fn lookup(&self, resource: &str) -> Result<&ResourceTemplate, LeaseError> {
        self.lookup_index(resource).map(|i| &self.templates[i])
    }

    /// Like [`lookup`](Self::lookup), returning the template's position in the list.
    pub fn lookup_index(&self, resource: &str) -> Result<usize, LeaseError> {
        if let Some(&i) = self.exact.get(resource) {
            return Ok(i);
        }
        self.globs
            .iter()
            .copied()
            .find(|&i| glob_match(&self.templates[i].identifier_glob, resource))
            .ok_or_else(|| LeaseError::UnknownResource {
                resource: resource.to_owned(),
            })
    }

    /// The templates in configuration order.
    pub fn templates(&self) -> &[ResourceTemplate] {
        &self.templates
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::config::AlgorithmKind;

    #[test]
    fn glob_semantics() {
        assert!(glob_match("*", ""));
        assert!(glob_match("*", "anything"));
        assert!(glob_match("mysql-*", "mysql-shard-7"));
        assert!(!glob_match("mysql-*", "pg-1"));
        assert!(glob_match("a*b*c", "axxbyyc"));
        assert!(!glob_match("a*b*c", "axxbyy"));
        assert!(glob_match("shard-?", "shard-é"));
        assert!(!glob_match("shard-?", "shard-12"));
        assert!(glob_match("exact", "exact"));
        assert!(!glob_match("exact", "exactly"));
    }

    #[test]
    fn exact_before_glob_then_order() {
        let set = TemplateSet::from_templates(vec![
            ResourceTemplate::new("db-*", 10.0, AlgorithmKind::FairShare),
            ResourceTemplate::new("db-7", 70.0, AlgorithmKind::FairShare),
            ResourceTemplate::new("d*", 5.0, AlgorithmKind::FairShare),
        ])
        .unwrap();
        assert_eq!(set.lookup("db-7").unwrap().capacity, 70.0);
        assert_eq!(set.lookup("db-8").unwrap().capacity, 10.0);
        assert_eq!(set.lookup("dx").unwrap().capacity, 5.0);
        let err = set.lookup("cache").unwrap_err();
        assert!(err.to_string().contains("`cache`"), "{err}");
    }
}
