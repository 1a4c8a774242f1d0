//! The client address of a request: the TCP peer, or, when the peer is a trusted
//! proxy (`trusted_proxies`), the address that proxy reports in `X-Forwarded-For`.
//!
//! The list is walked from the right (the hop nearest to us) while the current hop is
//! trusted; the first address not in a trusted range is the client. So a client
//! cannot choose its address by sending its own `X-Forwarded-For`: without trusted
//! proxies the header is ignored, and with them only what they appended counts.

use std::net::IpAddr;

use actix_web::HttpRequest;
use ipnet::IpNet;

/// The ranges whose `X-Forwarded-For` is believed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    /// Parses a comma-separated list of CIDRs (`10.0.0.0/8`) or single addresses.
    pub fn parse(list: &str) -> Result<Self, String> {
        list.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse::<IpNet>()
                    .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| format!("{s:?} is not an address or CIDR range"))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(TrustedProxies)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn trusts(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.0.iter().any(|net| net.contains(&ip))
    }

    /// The client address of a connection from `peer` that carried the
    /// `X-Forwarded-For` values `forwarded` (every header line, in order).
    pub fn resolve<'a>(&self, peer: IpAddr, forwarded: impl IntoIterator<Item = &'a str>) -> IpAddr {
        let mut client = canonical(peer);
        if !self.trusts(client) {
            return client;
        }
        let hops: Vec<&str> = forwarded.into_iter().flat_map(|v| v.split(',')).collect();
        for hop in hops.iter().rev() {
            match hop.trim().parse::<IpAddr>() {
                Ok(ip) => client = canonical(ip),
                // A garbled entry: the last trusted hop is all we know.
                Err(_) => break,
            }
            if !self.trusts(client) {
                break;
            }
        }
        client
    }

    /// The client address of `req`; `None` when the peer address is unknown.
    pub fn client_ip(&self, req: &HttpRequest) -> Option<IpAddr> {
        let peer = req.peer_addr()?.ip();
        let forwarded = req.headers().get_all("x-forwarded-for").filter_map(|v| v.to_str().ok());
        Some(self.resolve(peer, forwarded))
    }
}

/// An IPv4 address mapped into IPv6 (`::ffff:10.0.0.1`) is that IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn without_trusted_proxies_the_header_is_ignored() {
        let none = TrustedProxies::default();
        assert_eq!(none.resolve(ip("203.0.113.9"), ["1.2.3.4"]), ip("203.0.113.9"));
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_forwards() {
        let t = TrustedProxies::parse("10.0.0.0/8").unwrap();
        assert_eq!(t.resolve(ip("203.0.113.9"), ["1.2.3.4"]), ip("203.0.113.9"));
    }

    #[test]
    fn walks_from_the_right_skipping_trusted_hops() {
        let t = TrustedProxies::parse("10.0.0.0/8, 192.168.1.1").unwrap();
        // client forged "6.6.6.6"; the real client 198.51.100.7 reached proxy
        // 192.168.1.1, which reached the load balancer 10.0.0.2.
        let xff = ["6.6.6.6, 198.51.100.7", "192.168.1.1"];
        assert_eq!(t.resolve(ip("10.0.0.2"), xff), ip("198.51.100.7"));
        // Everything trusted: the leftmost address is the client.
        assert_eq!(t.resolve(ip("10.0.0.2"), ["10.1.1.1"]), ip("10.1.1.1"));
        // No header: the proxy itself.
        assert_eq!(t.resolve(ip("10.0.0.2"), []), ip("10.0.0.2"));
        // A garbled hop stops the walk at the last trusted one.
        assert_eq!(t.resolve(ip("10.0.0.2"), ["1.2.3.4, junk"]), ip("10.0.0.2"));
        assert_eq!(t.resolve(ip("10.0.0.2"), ["2001:db8::1"]), ip("2001:db8::1"));
    }

    #[test]
    fn mapped_ipv4_peers_match_ipv4_ranges() {
        let t = TrustedProxies::parse("127.0.0.1").unwrap();
        assert_eq!(t.resolve(ip("::ffff:127.0.0.1"), ["198.51.100.7"]), ip("198.51.100.7"));
    }

    #[test]
    fn parse_refuses_garbage() {
        assert!(TrustedProxies::parse("10.0.0.0/8,nope").is_err());
        assert!(TrustedProxies::parse("").unwrap().is_empty());
        assert!(TrustedProxies::parse("::1, 10.0.0.0/33").is_err());
    }
}
