//! Where a webhook may be sent: the URL rules (at create, update and before every
//! send) and the resolver that checks the addresses a hostname resolves to.
//!
//! The resolver is the only DNS lookup of a send: it resolves once, refuses the
//! name when any address is forbidden, and hands the checked addresses to the
//! connector, which connects to one of them. A name that changes its answer between
//! the check at create time and the send is therefore checked again, on the very
//! addresses used. Redirects are never followed (the client has them disabled).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use futures_util::future::LocalBoxFuture;

/// Why a target was refused (the message is shown to the caller).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

fn refused(message: impl Into<String>) -> Refused {
    Refused(message.into())
}

/// Checks a webhook URL. `dev` (development mode) also allows `http://` and loopback.
pub fn check_url(raw: &str, dev: bool) -> Result<url::Url, Refused> {
    let url = url::Url::parse(raw).map_err(|_| refused("must be an absolute URL"))?;
    match url.scheme() {
        "https" => {}
        "http" if dev => {}
        _ => return Err(refused("must use https")),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(refused("must not carry credentials"));
    }
    match url.host() {
        None => Err(refused("must name a host")),
        Some(url::Host::Ipv6(_)) => Err(refused("must not be an IPv6 literal")),
        Some(url::Host::Ipv4(ip)) => check_ip(IpAddr::V4(ip), dev).map(|()| url.clone()),
        Some(url::Host::Domain(name)) => check_name(name, dev).map(|()| url.clone()),
    }
}

/// Names that always mean this machine or the local network.
fn check_name(name: &str, dev: bool) -> Result<(), Refused> {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    if name.is_empty() || name.ends_with(".local") || name == "local" {
        return Err(refused("must not be a .local name"));
    }
    if !dev && (name == "localhost" || name.ends_with(".localhost")) {
        return Err(refused("must not be a loopback address"));
    }
    Ok(())
}

/// Refuses private, loopback (outside dev mode), link-local, unique-local,
/// metadata and other non-public addresses.
pub fn check_ip(ip: IpAddr, dev: bool) -> Result<(), Refused> {
    match ip {
        IpAddr::V4(v4) => check_v4(v4, dev),
        IpAddr::V6(v6) => check_v6(v6, dev),
    }
}

fn check_v4(ip: Ipv4Addr, dev: bool) -> Result<(), Refused> {
    if ip.is_loopback() {
        return if dev { Ok(()) } else { Err(refused("must not be a loopback address")) };
    }
    let [a, b, ..] = ip.octets();
    let reason = if ip.is_private() {
        "must not be a private address"
    } else if ip.is_link_local() {
        "must not be a link-local or metadata address"
    } else if ip.is_unspecified() || a == 0 {
        "must not be an unspecified address"
    } else if a == 100 && (64..128).contains(&b) {
        "must not be a shared (carrier-grade NAT) address"
    } else if ip.is_broadcast() || ip.is_multicast() || a >= 240 {
        "must not be a broadcast, multicast or reserved address"
    } else if a == 192 && b == 0 && ip.octets()[2] == 0 {
        "must not be an IETF protocol address"
    } else if ip == Ipv4Addr::new(168, 63, 129, 16) {
        "must not be a metadata address"
    } else {
        return Ok(());
    };
    Err(refused(reason))
}

fn check_v6(ip: Ipv6Addr, dev: bool) -> Result<(), Refused> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return check_v4(v4, dev);
    }
    let seg = ip.segments();
    // NAT64 (64:ff9b::/96) reaches the embedded IPv4 address.
    if seg[0] == 0x64 && seg[1] == 0xff9b && seg[2..6] == [0, 0, 0, 0] {
        let o = ip.octets();
        return check_v4(Ipv4Addr::new(o[12], o[13], o[14], o[15]), dev);
    }
    if ip.is_loopback() {
        return if dev { Ok(()) } else { Err(refused("must not be a loopback address")) };
    }
    let reason = if ip.is_unspecified() {
        "must not be an unspecified address"
    } else if (seg[0] & 0xfe00) == 0xfc00 {
        "must not be a unique-local address"
    } else if (seg[0] & 0xffc0) == 0xfe80 {
        "must not be a link-local address"
    } else if ip.is_multicast() {
        "must not be a multicast address"
    } else {
        return Ok(());
    };
    Err(refused(reason))
}

/// Resolves a host and checks every address; all must be allowed.
pub async fn resolve_checked(host: &str, port: u16, dev: bool) -> Result<Vec<SocketAddr>, Refused> {
    check_name(host, dev)?;
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| refused(format!("could not resolve {host}: {e}")))?
        .collect();
    if addrs.is_empty() {
        return Err(refused(format!("{host} has no address")));
    }
    for a in &addrs {
        check_ip(a.ip(), dev).map_err(|e| refused(format!("{host} resolves to {}: {e}", a.ip())))?;
    }
    Ok(addrs)
}

/// The connector's resolver: only checked addresses are ever connected to.
pub struct CheckedResolver {
    pub dev: bool,
}

impl actix_tls::connect::Resolve for CheckedResolver {
    fn lookup<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> LocalBoxFuture<'a, Result<Vec<SocketAddr>, Box<dyn std::error::Error>>> {
        Box::pin(async move {
            resolve_checked(host, port, self.dev).await.map_err(|e| Box::new(e) as Box<dyn std::error::Error>)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(url: &str, dev: bool) -> bool {
        check_url(url, dev).is_ok()
    }

    #[test]
    fn production_rules() {
        assert!(ok("https://hooks.example.com/x", false));
        assert!(ok("https://93.184.216.34/x", false));
        for bad in [
            "http://hooks.example.com/x",
            "ftp://hooks.example.com/x",
            "https://user:pw@hooks.example.com/x",
            "https://localhost/x",
            "https://LOCALHOST./x",
            "https://a.localhost/x",
            "https://printer.local/x",
            "https://printer.local./x",
            "https://127.0.0.1/x",
            "https://10.1.2.3/x",
            "https://172.16.0.1/x",
            "https://192.168.1.1/x",
            "https://169.254.169.254/latest/meta-data",
            "https://0.0.0.0/x",
            "https://100.64.0.1/x",
            "https://[::1]/x",
            "https://[2001:db8::1]/x",
            "not a url",
        ] {
            assert!(!ok(bad, false), "{bad}");
        }
    }

    #[test]
    fn dev_mode_allows_http_and_loopback_only() {
        assert!(ok("http://127.0.0.1:9000/hook", true));
        assert!(ok("http://localhost:9000/hook", true));
        assert!(!ok("http://10.0.0.1/hook", true));
        assert!(!ok("http://169.254.169.254/hook", true));
        assert!(!ok("http://[::1]:9000/hook", true));
    }

    #[test]
    fn resolved_addresses_are_checked_too() {
        let v6 = |s: &str| check_ip(s.parse().unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)), false).is_ok();
        assert!(!v6("::1"));
        assert!(!v6("fd00:ec2::254"));
        assert!(!v6("fe80::1"));
        assert!(!v6("::ffff:127.0.0.1"));
        assert!(!v6("::ffff:169.254.169.254"));
        assert!(!v6("64:ff9b::a9fe:a9fe"));
        assert!(v6("2606:4700::1111"));
        assert!(v6("1.1.1.1"));
    }

    #[tokio::test]
    async fn resolution_is_checked() {
        assert!(resolve_checked("localhost", 443, false).await.is_err());
        let dev = resolve_checked("localhost", 443, true).await;
        assert!(dev.is_ok_and(|a| a.iter().all(|a| a.ip().is_loopback())));
    }
}
