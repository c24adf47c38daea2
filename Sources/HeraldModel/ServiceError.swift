/// The status codes of gRPC, which every Herald RPC reports, whatever the transport.
///
/// Service code throws ``ServiceError``s with these codes and never imports grpc-swift; the transport
/// bindings translate them, and the edge maps them to HTTP in one place.
public enum StatusCode: Int, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    case ok = 0
    case cancelled = 1
    case unknown = 2
    case invalidArgument = 3
    case deadlineExceeded = 4
    case notFound = 5
    case alreadyExists = 6
    case permissionDenied = 7
    case resourceExhausted = 8
    case failedPrecondition = 9
    case aborted = 10
    case outOfRange = 11
    case unimplemented = 12
    case `internal` = 13
    case unavailable = 14
    case dataLoss = 15
    case unauthenticated = 16

    public var description: String {
        switch self {
        case .ok: "OK"
        case .cancelled: "CANCELLED"
        case .unknown: "UNKNOWN"
        case .invalidArgument: "INVALID_ARGUMENT"
        case .deadlineExceeded: "DEADLINE_EXCEEDED"
        case .notFound: "NOT_FOUND"
        case .alreadyExists: "ALREADY_EXISTS"
        case .permissionDenied: "PERMISSION_DENIED"
        case .resourceExhausted: "RESOURCE_EXHAUSTED"
        case .failedPrecondition: "FAILED_PRECONDITION"
        case .aborted: "ABORTED"
        case .outOfRange: "OUT_OF_RANGE"
        case .unimplemented: "UNIMPLEMENTED"
        case .internal: "INTERNAL"
        case .unavailable: "UNAVAILABLE"
        case .dataLoss: "DATA_LOSS"
        case .unauthenticated: "UNAUTHENTICATED"
        }
    }
}

/// An RPC failure with a status code and a message meant for the caller.
///
/// The message must be safe to show to whoever made the call: never a credential, a secure
/// payload, or an internal detail such as a SQL error (log those instead).
public struct ServiceError: Error, Sendable, Hashable, CustomStringConvertible {
    public var code: StatusCode
    public var message: String
    /// What a caller acts on besides the code, as trailing metadata (lower-case keys) on both
    /// transports: gRPC trailers, and the lean protocol's END trailers. Keys Herald sets:
    /// `retry-after` (whole seconds, see ``retryAfterSeconds``) and `herald-reason`.
    public var metadata: [String: String]

    /// The metadata keys Herald's errors carry; a gRPC client keeps these from the trailers and
    /// leaves the transport's own (`content-type`, `grpc-*`…) out.
    public static let metadataKeys: Set<String> = ["retry-after", "herald-reason"]

    public init(_ code: StatusCode, _ message: String, metadata: [String: String] = [:]) {
        self.code = code
        self.message = message
        self.metadata = metadata
    }

    /// RESOURCE_EXHAUSTED that the caller may retry after `seconds` (a lockout, a busy gate): the
    /// edge answers 429 with `Retry-After`.
    public static func resourceExhausted(_ message: String, retryAfterSeconds seconds: Int) -> Self {
        .init(.resourceExhausted, message, metadata: ["retry-after": String(seconds)])
    }

    /// RESOURCE_EXHAUSTED for a quota spent (a hub's pushes a day or a month): waiting a moment
    /// does not help, so the edge answers 403 (Notification Hubs' `QuotaExceeded`), not 429.
    public static func quotaExceeded(_ message: String) -> Self {
        .init(.resourceExhausted, message, metadata: ["herald-reason": "quota-exceeded"])
    }

    /// Whether this is ``quotaExceeded(_:)``.
    public var isQuotaExceeded: Bool { code == .resourceExhausted && metadata["herald-reason"] == "quota-exceeded" }

    /// When the caller may try again, in seconds, if the service said.
    public var retryAfterSeconds: Int? { metadata["retry-after"].flatMap { Int($0) }.flatMap { $0 >= 0 ? $0 : nil } }

    public var description: String { "\(code): \(message)" }

    public static func invalidArgument(_ message: String) -> Self { .init(.invalidArgument, message) }
    public static func notFound(_ message: String) -> Self { .init(.notFound, message) }
    public static func unauthenticated(_ message: String) -> Self { .init(.unauthenticated, message) }
    public static func unavailable(_ message: String) -> Self { .init(.unavailable, message) }
    public static func failedPrecondition(_ message: String) -> Self { .init(.failedPrecondition, message) }

    /// A write refused because the service's disk is full (SQLITE_FULL). UNAVAILABLE: it is
    /// transient for the caller, and reads go on working. The edge answers it with 507.
    public static let storageFull = ServiceError(
        .unavailable, "storage full: this service cannot write until disk space is freed; reads still work",
        metadata: ["herald-reason": "storage-full"])

    /// Whether this is ``storageFull`` (its `herald-reason` travels over both transports).
    public var isStorageFull: Bool { code == .unavailable && metadata["herald-reason"] == "storage-full" }
}

/// An error from a library Herald uses that some of whose cases have a status the caller should see
/// (SQLite's "disk full" is ``ServiceError/storageFull``). The conformance lives beside the library
/// (HeraldService for GRDB), so the RPC layer, and the published client with it, does not depend on it.
public protocol ServiceErrorConvertible: Error {
    /// The status to answer, or nil for an unexpected error (INTERNAL, detail logged).
    var serviceError: ServiceError? { get }
}
