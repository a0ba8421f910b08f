//! The rooms and the request of the `rules` bench and the `rules_instructions` example: a
//! room without rules, one of 20 rules none of which matches a browser's request, and one of
//! 20 rules over what a request line and its peer say (method, host, path, client) alone,
//! none of which matches either.

/// The first eight rules of both rooms with rules: methods, paths and a client block.
macro_rules! request_line_rules {
    () => {
        r#"
  { name = "static", action = "bypass", methods = ["GET", "HEAD"], paths = ["/static/", "/assets/"] },
  { name = "health", action = "bypass", paths = ["/health", "/ready"] },
  { name = "favicon", action = "bypass", paths = ["/favicon.ico", "/robots.txt"] },
  { name = "internal", action = "reject", paths = ["/internal/"] },
  { name = "admin", action = "bypass", paths = ["/admin/"], clients = ["10.0.0.0/8"] },
  { name = "trace", action = "reject", methods = ["TRACE", "CONNECT"] },
  { name = "purge", action = "reject", methods = ["PURGE"] },
  { name = "webhooks", action = "bypass", methods = ["POST"], paths = ["/hooks/"] },
"#
    };
}

pub const ROOMS: &str = concat!(
    r#"
[[rooms]]
name = "plain"
total_active_users = 100000
new_users_per_minute = 4000000000
routes = [{ host = "plain.example.com" }]

[[rooms]]
name = "rules"
total_active_users = 100000
new_users_per_minute = 4000000000
routes = [{ host = "shop.example.com", path = "/" }, { host = "*.example.org" }]
rules = [
"#,
    request_line_rules!(),
    r#"  { name = "monitor", action = "bypass", headers = { "x-monitor-token" = "s3cret" } },
  { name = "bots", action = "reject", headers = { "user-agent" = "*BadBot*" } },
  { name = "crawlers", action = "count_only", headers = { "user-agent" = "*Googlebot*" } },
  { name = "partner", action = "bypass", headers = { "x-partner-key" = "pk-*" } },
  { name = "staff", action = "bypass", cookies = { "staff" = "st-*" } },
  { name = "beta", action = "queue", cookies = { "beta" = "1" } },
  { name = "preview-cookie", action = "bypass", cookies = { "preview" = "yes" } },
  { name = "office", action = "bypass", clients = ["192.0.2.0/24", "2001:db8:1::/48"] },
  { name = "vpn", action = "bypass", clients = ["198.51.100.0/24"] },
  { name = "blocked", action = "reject", clients = ["203.0.113.0/24"] },
  { name = "preview", action = "bypass", query = ["preview=yes"] },
  { name = "debug", action = "reject", query = ["debug"] },
]

[[rooms]]
name = "structural"
total_active_users = 100000
new_users_per_minute = 4000000000
routes = [{ host = "api.example.com" }]
rules = [
"#,
    request_line_rules!(),
    r#"  { name = "metrics", action = "bypass", paths = ["/metrics"], clients = ["10.0.0.0/8", "172.16.0.0/12"] },
  { name = "images", action = "bypass", paths = ["/img/", "/images/", "/media/"] },
  { name = "wellknown", action = "bypass", paths = ["/.well-known/"] },
  { name = "legacy", action = "reject", paths = ["/cgi-bin/", "/wp-admin/"] },
  { name = "status", action = "bypass", hosts = ["status.example.com"] },
  { name = "partners", action = "count_only", hosts = ["*.partners.example.com"] },
  { name = "office", action = "bypass", clients = ["192.0.2.0/24", "2001:db8:1::/48"] },
  { name = "vpn", action = "bypass", clients = ["198.51.100.0/24"] },
  { name = "blocked", action = "reject", clients = ["203.0.113.0/24"] },
  { name = "monitoring", action = "bypass", methods = ["OPTIONS"], clients = ["100.100.0.0/16"] },
  { name = "uploads", action = "queue", methods = ["PUT", "PATCH"], paths = ["/upload/"] },
  { name = "deletes", action = "reject", methods = ["DELETE"], paths = ["/products/"] },
]
"#
);

/// A browser's request to `host` carrying `cookie`, as a server hands it over.
pub fn headers(host: &'static str, cookie: &str) -> Vec<(&'static [u8], Vec<u8>)> {
    [
        ("host", host.to_owned()),
        ("user-agent", "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36".into()),
        ("accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8".into()),
        ("accept-language", "en-US,en;q=0.9".into()),
        ("accept-encoding", "gzip, deflate, br".into()),
        ("referer", "https://shop.example.com/products".into()),
        ("sec-fetch-mode", "navigate".into()),
        ("upgrade-insecure-requests", "1".into()),
        ("x-forwarded-proto", "https".into()),
        ("cookie", format!("_ga=GA1.1.1234567890.1700000000; theme=dark; {cookie}")),
    ]
    .into_iter()
    .map(|(n, v)| (n.as_bytes(), v.into_bytes()))
    .collect()
}
