/// Random bytes for secrets and unguessable ids, from the system's generator.
///
/// `SystemRandomNumberGenerator` makes one `getrandom` system call per value drawn, whatever its
/// width: a byte drawn at a time costs a call per byte. herald-registration drew its ids' 24
/// characters one at a time, 48 calls for an NH installation with a template, and the
/// Web Push sender each message's 16-byte salt. Here a call gives 8 bytes.
public enum SecureRandom {
    /// `count` random bytes (at most 4,096: these are ids and keys), one system call per 8.
    public static func bytes(_ count: Int) -> [UInt8] {
        let count = min(max(count, 0), 4096)
        var generator = SystemRandomNumberGenerator()
        var bytes: [UInt8] = []
        bytes.reserveCapacity(count + 7)
        while bytes.count < count {
            withUnsafeBytes(of: generator.next() as UInt64) { bytes.append(contentsOf: $0) }
        }
        bytes.removeLast(bytes.count - count)
        return bytes
    }

    /// `characters` random characters of RFC 4648's base-32 alphabet in lower case (5 bits each:
    /// 24 characters are 120 bits).
    public static func base32(_ characters: Int) -> String {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyz234567".utf8)
        // A byte's low 5 bits each: 256 is a multiple of 32, so every character is as likely.
        return String(decoding: bytes(characters).map { alphabet[Int($0 & 31)] }, as: UTF8.self)
    }
}
