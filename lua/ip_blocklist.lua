-- ip_blocklist.lua: deny clients whose address is in a list of networks (403, tag blocklist).
--
-- The address checked is req:client_ip(): the peer of the connection, or the address the
-- PROXY protocol header carried when the listener accepts one. X-Forwarded-For is not
-- consulted: any client can write it.
--
-- Knobs: the BLOCKED list. Entries are networks ("10.0.0.0/8", "2001:db8::/32") or single
-- addresses; IPv4-mapped IPv6 clients (::ffff:192.0.2.1) match IPv4 networks.
--
-- Cost model: the set is compiled, sorted and merged once at load (sluice.cidrs); each
-- request is one client_ip() call and one binary search in C, whatever the list's size.

local BLOCKED = sluice.cidrs{
  -- Example entries: the documentation ranges (RFC 5737, RFC 3849). No real client comes
  -- from them, so the example blocks nothing until you add your own below.
  "192.0.2.0/24",
  "198.51.100.0/24",
  "203.0.113.0/24",
  "2001:db8::/32",

  -- ==== your networks here ====
  -- "10.66.0.0/16",
  -- "2001:db8:dead::/48",
  -- "198.51.100.7",
}

function inspect(req)
  if BLOCKED:contains(req:client_ip()) then
    req:tag("blocklist")
    req:deny(403)
  end
end
