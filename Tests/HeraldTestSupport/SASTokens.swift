import Crypto
import Foundation

/// Notification Hubs SAS tokens the way the SDKs make them, written independently of Herald's
/// verifier so that the tests check it against the clients' rules, not against itself.
public enum SASTokens {
    /// Percent-encodes all but RFC 3986's unreserved characters, with upper or lower-case hex
    /// (JS and Go write `%3A`, .NET and Java `%3a`).
    public static func encode(_ text: String, lower: Bool) -> String {
        var out = ""
        for byte in text.utf8 {
            if (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || "-._~".utf8.contains(byte)
            {
                out.append(Character(Unicode.Scalar(byte)))
            } else {
                out += String(format: lower ? "%%%02x" : "%%%02X", byte)
            }
        }
        return out
    }

    /// base64(HMAC-SHA256(key as written, sr + "\n" + se)).
    public static func signature(_ sr: String, _ se: Int64, key: String) -> String {
        signature(sr, "\(se)", key: key)
    }

    /// The same over `se` as written, for expiries no well-behaved client sends (`1e99`, `-1`).
    public static func signature(_ sr: String, _ se: String, key: String) -> String {
        let mac = HMAC<SHA256>.authenticationCode(
            for: Data("\(sr)\n\(se)".utf8), using: SymmetricKey(data: Data(key.utf8)))
        return Data(mac).base64EncodedString()
    }

    /// `SharedAccessSignature …` with `sr` exactly as given, parameters in `order`, `sig` escaped in
    /// upper or lower case.
    public static func token(
        sr: String, keyName: String, key: String, expiry: Int64, order: [String] = ["sr", "sig", "se", "skn"],
        lower: Bool = false
    ) -> String {
        let values = [
            "sr": sr, "sig": encode(signature(sr, expiry, key: key), lower: lower), "se": "\(expiry)", "skn": keyName,
        ]
        return "SharedAccessSignature " + order.map { "\($0)=\(values[$0]!)" }.joined(separator: "&")
    }
}
