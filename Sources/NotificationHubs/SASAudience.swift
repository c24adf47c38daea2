import Foundation
import HeraldModel

/// Which requests a Notification Hubs SharedAccessSignature may be used for, from its `sr`: the one
/// rule herald-auth applies when it verifies a token and herald-edge when it reuses auth's answer
/// for another request with the same token.
public enum SASAudience {
    /// `sr` decoded, lower-cased, without scheme, query, fragment, default port or trailing `/`.
    public static func normalized(_ raw: String) -> String {
        var text = (raw.removingPercentEncoding ?? raw).lowercased()
        if let end = text.firstIndex(where: { $0 == "?" || $0 == "#" }) { text = String(text[..<end]) }
        if let scheme = text.range(of: "://") { text = String(text[scheme.upperBound...]) }
        return normalizedResource(text)
    }

    /// "host[:port]/path" lower-cased, without default port or trailing `/`.
    public static func normalizedResource(_ resource: String) -> String {
        var text = resource.lowercased()
        let slash = text.firstIndex(of: "/") ?? text.endIndex
        var host = String(text[..<slash])
        for port in [":443", ":80"] where host.hasSuffix(port) { host.removeLast(port.count) }
        text = host + text[slash...]
        while text.hasSuffix("/") { text.removeLast() }
        return text
    }

    /// Whether a token for `audience` may be used on `resource`: equal, or a prefix at a `/`.
    ///
    /// An audience whose host names no port covers that host on any port: the .NET SDK signs `sr`
    /// through a `UriBuilder` that drops the port of an `http://host:port` endpoint (NH itself is
    /// always on 443). The host must still match, and an audience with a port only that port.
    public static func covers(_ audience: String, resource: String) -> Bool {
        let resource = normalizedResource(resource)
        func matches(_ resource: String) -> Bool {
            !audience.isEmpty && (resource == audience || resource.hasPrefix(audience + "/"))
        }
        if matches(resource) { return true }
        guard port(of: audience) == nil, let resourcePort = port(of: resource) else { return false }
        let slash = resource.firstIndex(of: "/") ?? resource.endIndex
        var host = String(resource[..<slash])
        host.removeLast(resourcePort.count + 1)
        return matches(host + resource[slash...])
    }

    /// The port of "host[:port]/path" ("[v6]:port" too), nil when it names none.
    public static func port(of resource: String) -> Substring? {
        let host = resource[..<(resource.firstIndex(of: "/") ?? resource.endIndex)]
        guard let colon = host.lastIndex(of: ":"), !host[colon...].contains("]") else { return nil }
        if host.hasPrefix("["), !host[..<colon].hasSuffix("]") { return nil }
        let port = host[host.index(after: colon)...]
        return !port.isEmpty && port.allSatisfy(\.isNumber) ? port : nil
    }
}
