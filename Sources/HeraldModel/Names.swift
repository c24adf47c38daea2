public import HeraldProto

/// The alphabets of user names and tags, one definition for every service.
///
/// User names become the tag `username:<user>`, so they use the tag alphabet without `:`.
public enum Names {
    /// 1 to 64 characters of `A-Z a-z 0-9 _ @ # . -`.
    /// The deprecated `sender` of a send made with a hub's key (`SendRequest.principal` replaces
    /// it; read and written until 2027-03-01): `$` is in no user name, so no Herald user reads it
    /// as their own (a user named `sas` once read every NH send's outcome).
    public static let nhSender = "$sas"

    public static func isValidUserName(_ user: String) -> Bool {
        (1...64).contains(user.utf8.count) && user.utf8.allSatisfy { isTagByte($0) && $0 != UInt8(ascii: ":") }
    }

    /// 1 to `maxLength` characters of `A-Z a-z 0-9 _ @ # . : -`.
    public static func isValidTag(_ tag: String, maxLength: Int = 120) -> Bool {
        (1...maxLength).contains(tag.utf8.count) && tag.utf8.allSatisfy(isTagByte)
    }

    public static let userNameRule = "1 to 64 characters of A-Z a-z 0-9 _ @ # . -"

    /// The hub of the tutorial's routes, `/v1` and every call that names none. Always exists.
    public static let defaultHub = "default"

    /// First path segments the edge serves itself, so no hub may take them.
    public static let reservedHubNames: Set<String> = [
        "api", "v1", "healthz", "readyz", "metrics", "openapi.json", "console",
    ]

    public static let hubNameRule =
        "1 to 50 characters of a-z A-Z 0-9 . - _, starting and ending with a letter or digit"

    /// A hub name: the first segment of NH's paths (`/{hub}/installations/…`), so URL-safe without
    /// escaping; ``hubNameRule``. Reserved names are refused separately (``reservedHubNames``).
    public static func isValidHubName(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard (1...50).contains(bytes.count), let first = bytes.first, let last = bytes.last else { return false }
        func alnum(_ b: UInt8) -> Bool {
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(b) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(b)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(b)
        }
        return alnum(first) && alnum(last)
            && bytes.allSatisfy {
                alnum($0) || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_")
            }
    }

    /// The hub a request names, `default` when it names none.
    public static func hub(_ name: String) -> String { name.isEmpty ? defaultHub : name }

    /// A positive integer written the one canonical way: ASCII digits only, no sign, no leading
    /// zero, no more than fits an `Int64`. `nil` for anything else (`+120`, `0120`, `1e3`, ` 7`),
    /// so one id has one spelling and nothing downstream sees a number it did not expect.
    public static func positiveInteger(_ text: some StringProtocol) -> Int64? {
        let digits = text.utf8
        guard let first = digits.first, first >= UInt8(ascii: "1"), first <= UInt8(ascii: "9"), digits.count <= 19,
            digits.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") })
        else { return nil }
        return Int64(text)
    }

    static func isTagByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"), UInt8(ascii: "@"), UInt8(ascii: "#"),
            UInt8(ascii: "."), UInt8(ascii: ":"), UInt8(ascii: "-"):
            true
        default: false
        }
    }
}

extension Platform {
    /// The platform's lower-case name as Herald's CLI and JSON show it: apns, fcm, wns, browser.
    public var name: String {
        switch self {
        case .apns: "apns"
        case .fcm: "fcm"
        case .wns: "wns"
        case .browser: "browser"
        default: "unknown"
        }
    }
}

extension Names {
    /// The tag the server puts on every tutorial registration of `user`, and what a send "to a
    /// user" targets: the tutorial's `username:<user>`.
    public static func userTag(_ user: String) -> String { "username:\(user)" }

    /// The system tag NH gives an installation with a `userId`: `$UserId:{<user>}`.
    public static func installationUserTag(_ user: String) -> String { "$UserId:{\(user)}" }

    /// The two system tags that name a user's devices (``userTag(_:)``, ``installationUserTag(_:)``).
    /// An erase and an export find a person's devices and sends by them.
    public static func userSystemTags(of user: String) -> [String] { [userTag(user), installationUserTag(user)] }
}

extension Platform {
    /// The platforms Herald delivers to (each through its own sender, or the inbox), in the order
    /// its listings use.
    public static let delivered: [Platform] = [.apns, .fcm, .wns, .browser]
}

extension Outcome {
    /// Who sent it, for people (the console, `herald outcome`): the user's name, or `key <name>`
    /// for a hub's key; the deprecated `sender` for a send stored before its key's name was.
    public var senderName: String {
        if let principal {
            if !principal.user.isEmpty { return principal.user }
            if !principal.hubKey.isEmpty { return "key \(principal.hubKey)" }
        }
        return sender
    }
}
