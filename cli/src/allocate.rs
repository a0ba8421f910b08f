//! `velvet-rope allocate`: the steady-state allocation of one resource.
//!
//! Input (one JSON object): `{"algorithm": "fair_share", "capacity": 100, "reserved": 0,
//! "clients": [{"id": "a", "wants": 10, "subclients": 1, "priority": 0}]}` (`subclients`,
//! `priority` and `reserved` optional). Output: `{"grants": {"a": 10.0}}`.

use serde_json::{Map, Value};
use velvet_rope::lease::algorithm::{allocate, Demand};
use velvet_rope::lease::AlgorithmKind;

/// Runs `allocate` on the JSON `input`; `Err` is a one-line message for stderr (exit 2).
pub fn run(input: &str) -> Result<String, String> {
    let v: Value = serde_json::from_str(input).map_err(|e| format!("invalid JSON input: {e}"))?;
    let obj = v
        .as_object()
        .ok_or("input must be a JSON object with `algorithm`, `capacity` and `clients`")?;
    for key in obj.keys() {
        if !matches!(
            key.as_str(),
            "algorithm" | "capacity" | "clients" | "reserved"
        ) {
            return Err(format!(
                "unknown field `{key}` (expected algorithm, capacity, clients, reserved)"
            ));
        }
    }
    let name = obj
        .get("algorithm")
        .and_then(Value::as_str)
        .ok_or("`algorithm` must be a string: none, static, proportional_share, fair_share or reserved_plus_shared")?;
    let kind: AlgorithmKind = serde_json::from_value(Value::String(name.to_owned())).map_err(|_| {
        format!("unknown algorithm `{name}` (expected none, static, proportional_share, fair_share or reserved_plus_shared)")
    })?;
    let capacity = number(obj.get("capacity"), "capacity")?;
    if kind != AlgorithmKind::None && capacity <= 0.0 {
        return Err(format!("`capacity` must be positive, got {capacity}"));
    }
    let reserved = match obj.get("reserved") {
        None => 0.0,
        some => number(some, "reserved")?,
    };
    let clients = obj
        .get("clients")
        .and_then(Value::as_array)
        .ok_or("`clients` must be an array of {id, wants, subclients?, priority?}")?;
    let mut ids: Vec<&str> = Vec::with_capacity(clients.len());
    let mut demands = Vec::with_capacity(clients.len());
    for (i, c) in clients.iter().enumerate() {
        let c = c
            .as_object()
            .ok_or_else(|| format!("clients[{i}] must be an object"))?;
        for key in c.keys() {
            if !matches!(key.as_str(), "id" | "wants" | "subclients" | "priority") {
                return Err(format!("clients[{i}]: unknown field `{key}`"));
            }
        }
        let id = c
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("clients[{i}].id must be a string"))?;
        if ids.contains(&id) {
            return Err(format!("clients[{i}].id `{id}` appears twice"));
        }
        let wants = number(c.get("wants"), &format!("clients[{i}].wants"))?;
        let subclients = match c.get("subclients") {
            None => 1,
            Some(v) => v
                .as_u64()
                .filter(|&n| (1..=u64::from(u32::MAX)).contains(&n))
                .ok_or_else(|| format!("clients[{i}].subclients must be an integer >= 1"))?
                as u32,
        };
        let priority = match c.get("priority") {
            None => 0,
            Some(v) => v
                .as_u64()
                .filter(|&n| n <= u64::from(u32::MAX))
                .ok_or_else(|| format!("clients[{i}].priority must be an integer >= 0"))?
                as u32,
        };
        ids.push(id);
        demands.push(Demand {
            wants,
            subclients,
            priority,
        });
    }
    let grants = allocate(kind, capacity, reserved, &demands);
    let mut out = Map::new();
    for (id, g) in ids.iter().zip(grants) {
        let g = serde_json::Number::from_f64(g).ok_or("internal error: non-finite grant")?;
        out.insert((*id).to_owned(), Value::Number(g));
    }
    let mut root = Map::new();
    root.insert("grants".into(), Value::Object(out));
    serde_json::to_string(&Value::Object(root)).map_err(|e| e.to_string())
}

fn number(v: Option<&Value>, field: &str) -> Result<f64, String> {
    v.and_then(Value::as_f64)
        .filter(|x| x.is_finite() && *x >= 0.0)
        .ok_or_else(|| format!("`{field}` must be a number >= 0"))
}

#[cfg(test)]
mod tests {
    use super::run;

    #[test]
    fn single_client() {
        let out = run(
            r#"{"algorithm": "fair_share", "capacity": 100, "clients": [{"id": "a", "wants": 10, "subclients": 1, "priority": 0}]}"#,
        );
        assert_eq!(out.unwrap(), r#"{"grants":{"a":10.0}}"#);
    }

    #[test]
    fn doorman_examples() {
        let clients = r#"[{"id":"c0","wants":1000},{"id":"c1","wants":50},{"id":"c2","wants":10}]"#;
        let fair = run(&format!(
            r#"{{"algorithm":"fair_share","capacity":120,"clients":{clients}}}"#
        ))
        .unwrap();
        assert_eq!(fair, r#"{"grants":{"c0":60.0,"c1":50.0,"c2":10.0}}"#);
        let prop = run(&format!(
            r#"{{"algorithm":"proportional_share","capacity":120,"clients":{clients}}}"#
        ))
        .unwrap();
        let v: serde_json::Value = serde_json::from_str(&prop).unwrap();
        assert!((v["grants"]["c0"].as_f64().unwrap() - 69.69).abs() < 0.005);
        assert!((v["grants"]["c1"].as_f64().unwrap() - 40.31).abs() < 0.005);
        let exact = run(r#"{"algorithm":"fair_share","capacity":100,"clients":[{"id":"a","wants":21},{"id":"b","wants":14},{"id":"c","wants":28},{"id":"d","wants":31},{"id":"e","wants":5}]}"#).unwrap();
        assert!(exact.contains(r#""d":31.0"#), "{exact}");
    }

    #[test]
    fn subclients_and_priorities() {
        let out = run(r#"{"algorithm":"fair_share","capacity":100,"clients":[{"id":"lo","wants":80},{"id":"hi","wants":70,"priority":2},{"id":"w","wants":100,"subclients":3,"priority":2}]}"#).unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"grants": {"lo": 0.0, "hi": 25.0, "w": 75.0}})
        );
    }

    #[test]
    fn bad_input_is_one_line_error() {
        for (input, needle) in [
            ("not json", "invalid JSON"),
            ("[]", "JSON object"),
            (
                r#"{"algorithm":"fastest","capacity":1,"clients":[]}"#,
                "fastest",
            ),
            (
                r#"{"algorithm":"fair_share","capacity":-1,"clients":[]}"#,
                "capacity",
            ),
            (r#"{"algorithm":"fair_share","capacity":1}"#, "clients"),
            (
                r#"{"algorithm":"fair_share","capacity":1,"clients":[{"id":"a"}]}"#,
                "clients[0].wants",
            ),
            (
                r#"{"algorithm":"fair_share","capacity":1,"clients":[{"id":"a","wants":1,"subclients":0}]}"#,
                "subclients",
            ),
            (
                r#"{"algorithm":"fair_share","capacity":1,"clients":[{"id":"a","wants":1},{"id":"a","wants":1}]}"#,
                "twice",
            ),
            (
                r#"{"algorithm":"fair_share","capacity":1,"clients":[],"x":1}"#,
                "`x`",
            ),
        ] {
            let e = run(input).unwrap_err();
            assert!(e.contains(needle), "{input}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }
}
