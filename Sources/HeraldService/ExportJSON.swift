import Foundation
import HeraldModel
public import HeraldProto

/// The items of `herald users export`'s document, as each service writes them: one JSON object per
/// item, keys sorted, times in ISO 8601 (UTC, milliseconds), bytes in base64; and the checks every
/// ExportUser page request and every erase gets.
public enum ExportJSON {
    public static let maxPage: Int32 = 1000

    /// What every service checks of a request about one person (an erase, an export): it names
    /// one user, never everyone (an empty name would match every row that has none), and at most
    /// one hub. INVALID_ARGUMENT otherwise.
    public static func checkPerson(user: String, hub: String) throws {
        guard !user.isEmpty, user.utf8.count <= 256, hub.utf8.count <= 256 else {
            throw ServiceError.invalidArgument("user must be 1 to 256 bytes, hub at most 256")
        }
    }

    /// The page size asked for (0: 100); INVALID_ARGUMENT for a missing user or a bound exceeded.
    @discardableResult
    public static func check(_ request: ExportUserRequest) throws -> Int {
        try checkPerson(user: request.user, hub: request.hub)
        guard request.after.utf8.count <= 256 else { throw ServiceError.invalidArgument("after is over 256 bytes") }
        return try pageSize(request.limit)
    }

    /// A page request's `limit` as a size: 0 means 100; INVALID_ARGUMENT outside 0 to ``maxPage``.
    public static func pageSize(_ limit: Int32) throws -> Int {
        guard (0...maxPage).contains(limit) else { throw ServiceError.invalidArgument("limit must be 1 to \(maxPage)") }
        return limit == 0 ? 100 : Int(limit)
    }

    /// `2026-11-28T21:28:15.123Z` (``iso8601(unixMillis:fractional:)``); empty for none.
    public static func time(_ unixMillis: Int64) -> String {
        unixMillis > 0 ? iso8601(unixMillis: unixMillis) : ""
    }

    public static func encode(_ value: some Encodable) throws -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return Array(try encoder.encode(value))
    }
}
