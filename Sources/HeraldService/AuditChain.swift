public import Crypto
import HeraldModel
public import HeraldProto

/// The audit trail's hash chain: each record's hash covers its fields and the hash of the record
/// before it, so changing or taking out any record breaks every hash after it.
///
/// The hash is the lower-case hex SHA-256 of each field in `AuditRecord`'s field order (seq,
/// at_unix_ms, actor, action, hub, hub_id, target, client_address, request_id, status, detail,
/// prev_hash), each as an 8-byte big-endian length and its UTF-8 bytes, numbers in decimal: a
/// field cannot borrow bytes from its neighbour, and anyone can recompute it from a listing.
public enum AuditChain {
    /// The prev_hash of the first record.
    public static let genesis = String(repeating: "0", count: 64)

    /// The bounds AppendAudit holds a record to (bytes of UTF-8).
    public static let maxTextBytes = 256
    public static let maxShortBytes = 64

    /// The hash `record` must hold, from its fields and its prev_hash.
    public static func hash(_ record: AuditRecord) -> String {
        var hasher = SHA256()
        for field in [
            String(record.seq), String(record.atUnixMs), record.actor, record.action, record.hub, record.hubID,
            record.target, record.clientAddress, record.requestID, String(record.status), record.detail,
            record.prevHash,
        ] {
            let bytes = Array(field.utf8)
            var length = UInt64(bytes.count).bigEndian
            withUnsafeBytes(of: &length) { hasher.update(bufferPointer: $0) }
            hasher.update(data: bytes)
        }
        return hex(hasher.finalize())
    }

    /// How a record names a person as its target (a user erased, deleted or granted rights): a
    /// pseudonym, `user#` and the first 128 bits of SHA-256 over a label and the name, never the
    /// name, so that erasing them leaves the name in no table while the chain stays whole. Whoever
    /// knows the name finds its records (`herald audit --user NAME`); a list of names can be tried
    /// against it, so it is a pseudonym, not an anonymisation.
    public static func pseudonym(user: String) -> String {
        "user#" + hex(SHA256.hash(data: Array("herald-audit-user\u{0}\(user)".utf8))).prefix(32)
    }

    /// INVALID_ARGUMENT unless `request` may be appended: an actor and an action, each field
    /// within its bound.
    public static func validate(_ request: AppendAuditRequest) throws {
        guard !request.actor.isEmpty, !request.action.isEmpty else {
            throw ServiceError.invalidArgument("an audit record needs an actor and an action")
        }
        let bounds: [(String, String, Int)] = [
            ("actor", request.actor, maxTextBytes), ("action", request.action, maxShortBytes),
            ("hub", request.hub, maxTextBytes), ("hub_id", request.hubID, maxShortBytes),
            ("target", request.target, maxTextBytes), ("client_address", request.clientAddress, maxShortBytes),
            ("request_id", request.requestID, maxShortBytes), ("detail", request.detail, maxTextBytes),
        ]
        for (name, value, bound) in bounds where value.utf8.count > bound {
            throw ServiceError.invalidArgument("\(name) must be at most \(bound) bytes")
        }
    }

    /// What is wrong with one record of a listing.
    public struct Break: Sendable, Equatable, CustomStringConvertible {
        public var seq: Int64
        public var reason: String
        public var description: String { "record \(seq): \(reason)" }
    }

    /// Walks a trail's records in order, record by record, and keeps what breaks the chain: a
    /// record whose hash is not its fields' (altered), whose prev_hash is not the hash before it,
    /// or whose seq skips (a record taken out).
    public struct Verifier: Sendable {
        public private(set) var checked: Int64 = 0
        public private(set) var breaks: [Break] = []
        /// The last record's seq and hash (0 and ``genesis`` before any).
        public private(set) var headSeq: Int64 = 0
        public private(set) var headHash = AuditChain.genesis

        public init() {}

        public mutating func check(_ record: AuditRecord) {
            checked += 1
            if record.seq != headSeq + 1 {
                breaks.append(
                    Break(
                        seq: record.seq,
                        reason: "follows record \(headSeq): \(record.seq - headSeq - 1) record(s) missing before it"))
            } else if record.prevHash != headHash {
                breaks.append(Break(seq: record.seq, reason: "prev_hash is not the hash of the record before it"))
            }
            if AuditChain.hash(record) != record.hash {
                breaks.append(Break(seq: record.seq, reason: "altered: its hash is not the hash of its fields"))
            }
            headSeq = record.seq
            headHash = record.hash
        }
    }

    static func hex(_ digest: SHA256.Digest) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(64)
        for byte in digest {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}

/// An audit record as JSON, every field as herald-auth stores and hashes it, in camelCase:
/// `GET /v1/audit`'s records and `herald audit --json`'s lines.
public struct AuditRecordJSON: Encodable, Sendable {
    public var seq: Int64
    public var atUnixMs: Int64
    public var actor, action, hub, hubId, target, clientAddress, requestId: String
    public var status: Int32
    public var detail, prevHash, hash: String

    public init(_ record: AuditRecord) {
        seq = record.seq
        atUnixMs = record.atUnixMs
        actor = record.actor
        action = record.action
        hub = record.hub
        hubId = record.hubID
        target = record.target
        clientAddress = record.clientAddress
        requestId = record.requestID
        status = record.status
        detail = record.detail
        prevHash = record.prevHash
        hash = record.hash
    }
}
