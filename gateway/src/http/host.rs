//! The DNS-rebinding guard (catalogue AUTH-15). A web page whose domain an attacker re-points at
//! 127.0.0.1 reaches a server bound to loopback from the victim's browser, but its requests still
//! name the attacker's domain in `Host`. So a connection that arrived on a loopback address must
//! name a loopback host (`localhost`, `*.localhost`, a loopback IP) or one the operator listed in
//! `gateway.allowed_hosts` (a reverse proxy on the same machine that passes its own `Host`).
//! Connections on other addresses are reachable from the network anyway and are not checked.

use std::net::IpAddr;

use axum::http::HeaderValue;

/// Whether a request with this `Host` header may be served on a connection whose local address
/// is `local`. A request without `Host` (HTTP/1.0) did not come from a browser and is served.
pub fn allowed(host: Option<&HeaderValue>, local: IpAddr, allowed_hosts: &[String]) -> bool {
    if !local.is_loopback() {
        return true;
    }
    let Some(host) = host else {
        return true;
    };
    let Some(name) = host.to_str().ok().and_then(host_name) else {
        return false;
    };
    is_loopback_name(&name)
        || allowed_hosts
            .iter()
            .any(|allowed| allowed == "*" || allowed.eq_ignore_ascii_case(&name))
}

/// The host of a `Host` value without its port, lowercased, IPv6 without brackets.
fn host_name(value: &str) -> Option<String> {
    let value = value.trim();
    let name = if let Some(rest) = value.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        if !(after.is_empty() || after.starts_with(':')) {
            return None;
        }
        inside
    } else {
        match value.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            Some(_) => return None,
            None => value,
        }
    };
    let name = name.strip_suffix('.').unwrap_or(name);
    (!name.is_empty()).then(|| name.to_ascii_lowercase())
}

fn is_loopback_name(name: &str) -> bool {
    name == "localhost"
        || name.ends_with(".localhost")
        || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOOPBACK: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    fn check(host: &str, allowed_hosts: &[&str]) -> bool {
        let allowed_hosts: Vec<String> = allowed_hosts.iter().map(|h| h.to_string()).collect();
        allowed(
            Some(&HeaderValue::from_str(host).unwrap()),
            LOOPBACK,
            &allowed_hosts,
        )
    }

    #[test]
    fn loopback_names_pass_and_foreign_names_do_not() {
        for host in [
            "localhost",
            "LOCALHOST:8787",
            "localhost.",
            "console.localhost:1",
            "127.0.0.1:8787",
            "127.1.2.3",
            "[::1]:8787",
            "[::1]",
        ] {
            assert!(check(host, &[]), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:8787",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
            "10.0.0.1",
            "[::2]:80",
            "[::1]x",
            "localhost:port",
            "",
            ":8787",
        ] {
            assert!(!check(host, &[]), "{host}");
        }
    }

    #[test]
    fn listed_hosts_pass_and_a_star_passes_everything() {
        assert!(check("Agents.Example.com:443", &["agents.example.com"]));
        assert!(!check("other.example.com", &["agents.example.com"]));
        assert!(check("anything.example", &["*"]));
    }

    #[test]
    fn connections_on_other_addresses_are_not_checked() {
        let public: IpAddr = "192.0.2.10".parse().unwrap();
        let host = HeaderValue::from_static("evil.example");
        assert!(allowed(Some(&host), public, &[]));
        assert!(allowed(None, LOOPBACK, &[]));
    }
}
