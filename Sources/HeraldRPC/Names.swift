public import HeraldProto

/// The alphabets of user names and tags, one definition for every service.
///
/// User names become the tag `username:<user>`, so they use the tag alphabet without `:`.
public enum Names {
    /// 1 to 64 characters of `A-Z a-z 0-9 _ @ # . -`.
    public static func isValidUserName(_ user: String) -> Bool {
        (1...64).contains(user.utf8.count) && user.utf8.allSatisfy { isTagByte($0) && $0 != UInt8(ascii: ":") }
    }

    /// 1 to `maxLength` characters of `A-Z a-z 0-9 _ @ # . : -`.
    public static func isValidTag(_ tag: String, maxLength: Int = 120) -> Bool {
        (1...maxLength).contains(tag.utf8.count) && tag.utf8.allSatisfy(isTagByte)
    }

    public static let userNameRule = "1 to 64 characters of A-Z a-z 0-9 _ @ # . -"

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
