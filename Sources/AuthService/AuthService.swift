import Foundation
public import HeraldProto
public import HeraldRPC

/// How herald-auth decides who a caller is.
public enum AuthMode: String, CaseIterable, Sendable {
    /// The tutorial's rule: any user whose password equals the user name. For running the tutorial
    /// apps unchanged; never for production.
    case tutorial
    /// Real accounts with hashed passwords (not available yet).
    case accounts
}

/// Settings of herald-auth, besides ``RuntimeConfig``'s.
///
/// - `auth-mode` (`HERALD_AUTH_MODE`, default `tutorial`): `tutorial` or `accounts`.
public struct AuthConfig: Sendable {
    public static let keys: Set<String> = ["auth-mode"]
    public var mode: AuthMode

    public init(reader: ConfigReader) throws {
        mode = try reader.choice("auth-mode", default: .tutorial)
    }
}

/// Checks Authorization header values. Pure: no I/O, so the edge's hot path costs one cheap RPC.
public struct Authenticator: Sendable {
    public let mode: AuthMode

    public init(mode: AuthMode) {
        self.mode = mode
    }

    /// The principal named by `header`, or UNAUTHENTICATED saying what is wrong (never echoing it).
    public func authenticate(_ header: String) throws -> AuthenticateResponse {
        let trimmed = header.trimmingCharacters(in: .whitespaces)
        guard !trimmed.isEmpty else { throw ServiceError.unauthenticated("missing Authorization header") }
        let parts = trimmed.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard parts.count == 2 else { throw ServiceError.unauthenticated("malformed Authorization header") }
        switch parts[0].lowercased() {
        case "basic":
            return try basic(String(parts[1]).trimmingCharacters(in: .whitespaces))
        case "bearer":
            throw ServiceError.unauthenticated("bearer tokens are not enabled on this server")
        default:
            throw ServiceError.unauthenticated("unsupported authorization scheme; use Basic")
        }
    }

    private func basic(_ encoded: String) throws -> AuthenticateResponse {
        guard let data = Data(base64Encoded: encoded), let decoded = String(data: data, encoding: .utf8),
            let colon = decoded.firstIndex(of: ":")
        else {
            throw ServiceError.unauthenticated("malformed Basic credentials; expected base64(user:password)")
        }
        let user = String(decoded[..<colon])
        let password = String(decoded[decoded.index(after: colon)...])
        guard Self.isValidUserName(user) else {
            throw ServiceError.unauthenticated(
                "user names are 1 to 64 characters of A-Z a-z 0-9 _ @ # . -")
        }
        switch mode {
        case .tutorial:
            guard user == password else { throw ServiceError.unauthenticated("wrong user name or password") }
            return AuthenticateResponse(user: user, scheme: "basic")
        case .accounts:
            throw ServiceError.unauthenticated("wrong user name or password")
        }
    }

    /// User names become the tag "username:<user>", so they obey the tag alphabet (minus ':').
    public static func isValidUserName(_ user: String) -> Bool {
        guard (1...64).contains(user.utf8.count) else { return false }
        return user.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"), UInt8(ascii: "@"), UInt8(ascii: "#"),
                UInt8(ascii: "."), UInt8(ascii: "-"):
                true
            default: false
            }
        }
    }
}

/// herald-auth's start-up.
public enum AuthServer {
    public static func main() async -> Never {
        await HeraldProcess.main(rpcService: "auth", extraKeys: AuthConfig.keys) { context in
            let config = try AuthConfig(reader: context.reader)
            switch config.mode {
            case .tutorial:
                context.logger.warning(
                    "auth-mode tutorial: any user whose password equals the user name is accepted; do not use in production"
                )
            case .accounts:
                throw ConfigError("auth-mode accounts is not available in this release; use --auth-mode tutorial")
            }
            var table = MethodTable()
            let authenticator = Authenticator(mode: config.mode)
            table.register(AuthServiceMethods.authenticate) { request, _ in
                try authenticator.authenticate(request.authorization)
            }
            return table
        }
    }
}
