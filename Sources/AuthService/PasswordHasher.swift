import Crypto
import CryptoExtras
import Foundation
import HeraldModel

/// Salted scrypt password hashes, stored as self-describing strings so the cost can be raised later
/// without invalidating existing hashes: `$scrypt$ln=17,r=8,p=1$<salt base64>$<hash base64>`.
///
/// Why scrypt from swift-crypto's `CryptoExtras` (BoringSSL's `EVP_PBE_scrypt`): it is memory-hard,
/// one of the hashes OWASP recommends for passwords, and swift-crypto is already in Herald's build
/// (grpc-swift's transport needs it), so it costs no new dependency. The mirror has no Argon2 or
/// bcrypt package outside Vapor.
public struct PasswordHasher: Sendable {
    /// log2 of scrypt's N. OWASP's minimum for scrypt is N = 2^17 with r = 8, p = 1 (128 MiB).
    public var logN: Int
    public var blockSize = 8
    public var parallelism = 1

    public init(logN: Int = 17) {
        self.logN = logN
    }

    /// A fresh hash of `password` with a random 16-byte salt.
    public func hash(_ password: String) throws -> String {
        let salt = SecureRandom.bytes(16)
        let key = try Self.derive(password, salt: salt, logN: logN, r: blockSize, p: parallelism)
        return
            "$scrypt$ln=\(logN),r=\(blockSize),p=\(parallelism)$\(Data(salt).base64EncodedString())$\(key.base64EncodedString())"
    }

    /// Whether `password` matches `encoded`, compared in constant time. A malformed `encoded`
    /// never matches.
    public func verify(_ password: String, against encoded: String) -> Bool {
        guard let parsed = Self.parse(encoded),
            let derived = try? Self.derive(password, salt: parsed.salt, logN: parsed.logN, r: parsed.r, p: parsed.p)
        else { return false }
        // SymmetricKey's == is swift-crypto's constant-time comparison.
        return SymmetricKey(data: derived) == SymmetricKey(data: parsed.hash)
    }

    /// Whether `encoded` was made with weaker parameters than this hasher's (rehash on next login).
    public func needsRehash(_ encoded: String) -> Bool {
        guard let parsed = Self.parse(encoded) else { return true }
        return parsed.logN < logN || parsed.r < blockSize
    }

    private static func derive(_ password: String, salt: [UInt8], logN: Int, r: Int, p: Int) throws -> Data {
        let key = try KDF.Scrypt.deriveKey(
            from: Array(password.utf8), salt: salt, outputByteCount: 32, rounds: 1 << logN, blockSize: r,
            parallelism: p)
        return key.withUnsafeBytes { Data($0) }
    }

    private static func parse(_ encoded: String) -> (logN: Int, r: Int, p: Int, salt: [UInt8], hash: Data)? {
        let parts = encoded.split(separator: "$", omittingEmptySubsequences: false)
        guard parts.count == 5, parts[0].isEmpty, parts[1] == "scrypt" else { return nil }
        var parameters: [Substring: Int] = [:]
        for item in parts[2].split(separator: ",") {
            let pair = item.split(separator: "=", maxSplits: 1)
            guard pair.count == 2, let value = Int(pair[1]) else { return nil }
            parameters[pair[0]] = value
        }
        guard let logN = parameters["ln"], (1...22).contains(logN), let r = parameters["r"], (1...32).contains(r),
            let p = parameters["p"], (1...16).contains(p),
            let salt = Data(base64Encoded: String(parts[3])), let hash = Data(base64Encoded: String(parts[4])),
            !salt.isEmpty, hash.count == 32
        else { return nil }
        return (logN, r, p, [UInt8](salt), hash)
    }
}
