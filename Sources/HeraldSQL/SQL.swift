public import Foundation

/// The two SQL dialects a store's statements are written for once: SQLite (GRDB on the system
/// libsqlite3) and PostgreSQL (postgres-nio).
public enum SQLDialect: Sendable {
    case sqlite
    case postgres
}

/// A value bound to a placeholder, or read from a column.
///
/// The few types Herald's schemas use: 64-bit integers (ids, Unix milliseconds, counts), text,
/// bytes, booleans. SQLite stores a boolean as the integer 0 or 1; PostgreSQL as BOOLEAN.
public enum SQLValue: Sendable, Hashable {
    case null
    case integer(Int64)
    case text(String)
    case bytes([UInt8])
    case bool(Bool)
    /// A list bound as one value: a PostgreSQL array, a JSON array in SQLite (``SQLQuery/StringInterpolation/appendInterpolation(anyOf:)-(_:[Int64])``),
    /// or one column of a ``SQLRowSource``. Never read from a column.
    case integers([Int64])
    case texts([String])
    case bools([Bool])
    case byteStrings([[UInt8]])
}

/// A Swift value that can be bound into a statement.
public protocol SQLBindable: Sendable {
    var sqlValue: SQLValue { get }
}

extension Int64: SQLBindable { public var sqlValue: SQLValue { .integer(self) } }
extension Int: SQLBindable { public var sqlValue: SQLValue { .integer(Int64(self)) } }
extension Int32: SQLBindable { public var sqlValue: SQLValue { .integer(Int64(self)) } }
extension String: SQLBindable { public var sqlValue: SQLValue { .text(self) } }
extension Bool: SQLBindable { public var sqlValue: SQLValue { .bool(self) } }
extension Array: SQLBindable where Element == UInt8 { public var sqlValue: SQLValue { .bytes(self) } }
extension Data: SQLBindable { public var sqlValue: SQLValue { .bytes([UInt8](self)) } }
extension Optional: SQLBindable where Wrapped: SQLBindable {
    public var sqlValue: SQLValue { self?.sqlValue ?? .null }
}

/// Text that differs between the dialects: column types, key generation, locking clauses.
///
/// Only what the schemas and queries need; everything else is written once, in the SQL both
/// dialects share (UPSERT with `ON CONFLICT`, `RETURNING`, multi-row `VALUES`).
public struct SQLFragment: Sendable, Hashable {
    public let sqlite: String
    public let postgres: String

    public init(sqlite: String, postgres: String) {
        self.sqlite = sqlite
        self.postgres = postgres
    }

    public func text(for dialect: SQLDialect) -> String { dialect == .sqlite ? sqlite : postgres }

    /// A 64-bit integer column.
    public static let int64 = SQLFragment(sqlite: "INTEGER", postgres: "BIGINT")
    /// A byte string column.
    public static let bytes = SQLFragment(sqlite: "BLOB", postgres: "BYTEA")
    /// A boolean column (0/1 in SQLite).
    public static let bool = SQLFragment(sqlite: "INTEGER", postgres: "BOOLEAN")
    public static let `true` = SQLFragment(sqlite: "1", postgres: "true")
    public static let `false` = SQLFragment(sqlite: "0", postgres: "false")
    /// A 64-bit key allocated by the database, atomically and never reused (SQLite's AUTOINCREMENT
    /// keeps a deleted row's id from coming back; PostgreSQL's identity is a sequence).
    public static let serialKey = SQLFragment(
        sqlite: "INTEGER PRIMARY KEY AUTOINCREMENT", postgres: "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY")
    /// After a `SELECT … LIMIT n` that picks rows to change: on PostgreSQL, rows another replica is
    /// changing are skipped rather than waited for; SQLite has one writer, so there is nothing to skip.
    public static let skipLocked = SQLFragment(sqlite: "", postgres: "FOR UPDATE SKIP LOCKED")
    /// After a `SELECT` in a transaction: the rows read are held until the commit (PostgreSQL);
    /// SQLite's transaction holds the whole file's write lock already.
    public static let forUpdate = SQLFragment(sqlite: "", postgres: "FOR UPDATE")
    /// As ``forUpdate``, for rows that must not change or go while the transaction runs.
    public static let forShare = SQLFragment(sqlite: "", postgres: "FOR SHARE")
}

/// One statement with its bound values, written once for both dialects by interpolation:
///
///     "SELECT content FROM payload WHERE id = \(id) AND recipient = \(user)"
///
/// Every interpolated value becomes a placeholder (`?` in SQLite, `$1…` in PostgreSQL), so no
/// value from outside is ever spliced into the text. `\(raw:)` splices text the code itself
/// wrote (a table name from a list in the store), and `\(fragment)` a ``SQLFragment``.
///
/// The text is kept as SQLite reads it while it is built, so a SQLite statement without fragments
/// costs no rendering (this is on FetchPayload's path); PostgreSQL's `$n` are numbered at
/// ``render(_:)``. Literal text must not hold a `?` of its own: both dialects would read it as a
/// placeholder.
public struct SQLQuery: Sendable, ExpressibleByStringInterpolation {
    /// SQLite's text: `?` per value, ``fragmentMark`` per fragment.
    var text: String
    var values: [SQLValue]
    var fragments: [SQLFragment]
    /// The rows the statement runs over (``SQLRowSource``), if any, and how many values precede
    /// their mark.
    var rows: (source: SQLRowSource, valuesBefore: Int)?

    static let fragmentMark: UInt8 = 0x01
    static let rowsMark: UInt8 = 0x02

    public init(stringLiteral value: String) {
        text = value
        values = []
        fragments = []
    }

    public init(stringInterpolation: StringInterpolation) {
        text = stringInterpolation.text
        values = stringInterpolation.values
        fragments = stringInterpolation.fragments
        rows = stringInterpolation.rows
    }

    /// Text the code wrote, never a value from outside.
    public init(raw: String) { self.init(stringLiteral: raw) }

    public struct StringInterpolation: StringInterpolationProtocol {
        var text = ""
        var values: [SQLValue] = []
        var fragments: [SQLFragment] = []
        var rows: (source: SQLRowSource, valuesBefore: Int)?

        public init(literalCapacity: Int, interpolationCount: Int) {
            text.reserveCapacity(literalCapacity + 2 * interpolationCount)
            values.reserveCapacity(interpolationCount)
        }

        public mutating func appendLiteral(_ literal: String) { text += literal }

        public mutating func appendInterpolation(_ value: some SQLBindable) {
            text += "?"
            values.append(value.sqlValue)
        }

        /// A value that may be missing: NULL when nil.
        public mutating func appendInterpolation<Value: SQLBindable>(_ value: Value?) {
            text += "?"
            values.append(value.sqlValue)
        }

        public mutating func appendInterpolation(_ fragment: SQLFragment) {
            text.unicodeScalars.append(Unicode.Scalar(SQLQuery.fragmentMark))
            fragments.append(fragment)
        }

        /// Another statement's text and values, in place (a shared condition, say).
        public mutating func appendInterpolation(_ sql: SQLQuery) {
            // trap-ok: how statements are composed is Herald code, never input.
            precondition(sql.rows == nil, "a statement over rows cannot be part of another")
            text += sql.text
            values += sql.values
            fragments += sql.fragments
        }

        /// `IN` the list `values`, bound as one value whatever its length: SQLite reads a JSON
        /// array with `json_each`, PostgreSQL an array with `= ANY`. So a batch's statement has
        /// one text (compiled once, cached) for any number of rows. Written `column \(anyOf: ids)`.
        public mutating func appendInterpolation(anyOf values: [Int64]) {
            appendAnyOf(.integers(values))
        }

        public mutating func appendInterpolation(anyOf values: [String]) {
            appendAnyOf(.texts(values))
        }

        private mutating func appendAnyOf(_ list: SQLValue) {
            appendInterpolation(SQLFragment(sqlite: "IN (SELECT value FROM json_each(", postgres: "= ANY("))
            text += "?"
            values.append(list)
            appendInterpolation(SQLFragment(sqlite: "))", postgres: ")"))
        }

        /// The table `u` of `source`'s rows, in a `FROM`: the statement runs over every row (see
        /// ``SQLRowSource``). One per statement.
        public mutating func appendInterpolation(rows source: SQLRowSource) {
            // trap-ok: how statements are composed is Herald code, never input.
            precondition(rows == nil, "one row source per statement")
            rows = (source, values.count)
            text.unicodeScalars.append(Unicode.Scalar(SQLQuery.rowsMark))
        }

        /// Text the code itself wrote: a table or column name from the store's own lists.
        public mutating func appendInterpolation(raw text: String) { self.text += text }

        /// A comma-separated list of placeholders, one per value (`IN (\(list: ids))`).
        public mutating func appendInterpolation(list values: [some SQLBindable]) {
            for (index, value) in values.enumerated() {
                text += index > 0 ? ", ?" : "?"
                self.values.append(value.sqlValue)
            }
        }
    }

    /// Appends `other`'s text and values: a statement whose shape depends on the request, built
    /// piece by piece.
    public static func += (query: inout SQLQuery, other: SQLQuery) {
        // trap-ok: how statements are composed is Herald code, never input.
        precondition(query.rows == nil && other.rows == nil, "a statement over rows is written whole")
        query.text += other.text
        query.values += other.values
        query.fragments += other.fragments
    }

    /// The statement's text in `dialect`, and its values in placeholder order.
    public func render(_ dialect: SQLDialect) -> (text: String, values: [SQLValue]) {
        // trap-ok: how statements are composed is Herald code, never input.
        precondition(rows == nil, "a statement over rows runs through its session")
        return renderText(dialect)
    }

    private func renderText(_ dialect: SQLDialect, rowsText: String = "") -> (text: String, values: [SQLValue]) {
        if dialect == .sqlite, fragments.isEmpty, rows == nil { return (text, values) }
        var out: [UInt8] = []
        out.reserveCapacity(text.utf8.count + 3 * values.count + 24 * fragments.count)
        var placeholder = 0
        var fragment = 0
        // Both marks are ASCII, so a byte of a multi-byte character is never taken for one.
        for byte in text.utf8 {
            if byte == UInt8(ascii: "?"), dialect == .postgres {
                placeholder += 1
                out.append(UInt8(ascii: "$"))
                out.append(contentsOf: String(placeholder).utf8)
            } else if byte == Self.fragmentMark {
                out.append(contentsOf: fragments[fragment].text(for: dialect).utf8)
                fragment += 1
            } else if byte == Self.rowsMark {
                for byte in rowsText.utf8 {
                    if byte == UInt8(ascii: "?"), dialect == .postgres {
                        placeholder += 1
                        out.append(UInt8(ascii: "$"))
                        out.append(contentsOf: String(placeholder).utf8)
                    } else {
                        out.append(byte)
                    }
                }
            } else {
                out.append(byte)
            }
        }
        return (String(decoding: out, as: UTF8.self), values)
    }

    /// The statement as PostgreSQL runs it: one text, and the values of each run. A statement
    /// over rows (``SQLRowSource``) runs once per ``SQLRowSource/chunk`` rows, each column bound
    /// as an array (one round trip per chunk); one without rows runs once. (SQLite binds a
    /// statement over rows once per row: ``sqliteStatement()``.)
    func postgresRuns() -> (text: String, values: [[SQLValue]]) {
        guard let (source, before) = rows else {
            let (text, values) = renderText(.postgres)
            return (text, [values])
        }
        let (text, values) = renderText(.postgres, rowsText: source.tableText(.postgres))
        let head = values[..<before]
        let tail = values[before...]
        let runs = stride(from: 0, to: source.count, by: SQLRowSource.chunk).map { start in
            Array(head) + source.arrays(start..<min(start + SQLRowSource.chunk, source.count)) + tail
        }
        return (text, runs)
    }

    /// SQLite's text, the values before and after the row source's, and the row source: what
    /// ``SQLiteDatabase`` binds once, rebinding only the source's columns for each row.
    func sqliteStatement() -> (
        text: String, head: ArraySlice<SQLValue>, tail: ArraySlice<SQLValue>, rows: SQLRowSource?
    ) {
        guard let (source, before) = rows else { return (renderText(.sqlite).text, values[...], [], nil) }
        let text = renderText(.sqlite, rowsText: source.tableText(.sqlite)).text
        return (text, values[..<before], values[before...], source)
    }
}

/// One row of a result, its columns by position.
///
/// By position, not by name: both drivers answer columns in the order the SELECT lists them, and a
/// lookup by name costs more than the read (GRDB lowercases every name on each lookup).
public struct SQLRow: Sendable {
    public let values: [SQLValue]

    public init(_ values: [SQLValue]) { self.values = values }

    /// The column at `index`, as `T`; an error (never a trap) when it is missing or of another type.
    @inlinable
    public subscript<T: SQLDecodable>(_ index: Int) -> T {
        get throws {
            guard values.indices.contains(index) else {
                throw SQLDecodingError(message: "no column \(index) in a row of \(values.count)")
            }
            return try T(sqlValue: values[index])
        }
    }
}

/// A Swift value read from a column.
public protocol SQLDecodable {
    init(sqlValue: SQLValue) throws
}

/// A column did not hold what the store expected: a schema the code does not match.
public struct SQLDecodingError: Error, CustomStringConvertible {
    public let message: String

    @usableFromInline
    init(message: String) { self.message = message }
    public var description: String { message }

    @usableFromInline
    static func mismatch(_ value: SQLValue, _ type: Any.Type) -> SQLDecodingError {
        SQLDecodingError(message: "cannot read \(value) as \(type)")
    }
}

extension Int64: SQLDecodable {
    @inlinable
    public init(sqlValue: SQLValue) throws {
        switch sqlValue {
        case .integer(let value): self = value
        case .bool(let value): self = value ? 1 : 0
        default: throw SQLDecodingError.mismatch(sqlValue, Int64.self)
        }
    }
}

extension Int: SQLDecodable {
    @inlinable
    public init(sqlValue: SQLValue) throws {
        let wide = try Int64(sqlValue: sqlValue)
        guard let value = Int(exactly: wide) else { throw SQLDecodingError.mismatch(sqlValue, Int.self) }
        self = value
    }
}

extension Int32: SQLDecodable {
    @inlinable
    public init(sqlValue: SQLValue) throws {
        let wide = try Int64(sqlValue: sqlValue)
        guard let value = Int32(exactly: wide) else { throw SQLDecodingError.mismatch(sqlValue, Int32.self) }
        self = value
    }
}

extension Bool: SQLDecodable {
    @inlinable
    public init(sqlValue: SQLValue) throws {
        switch sqlValue {
        case .bool(let value): self = value
        case .integer(let value): self = value != 0
        default: throw SQLDecodingError.mismatch(sqlValue, Bool.self)
        }
    }
}

extension String: SQLDecodable {
    @inlinable
    public init(sqlValue: SQLValue) throws {
        switch sqlValue {
        case .text(let value): self = value
        // SQLite hands back whatever was stored; a TEXT column written as bytes is still its text.
        case .bytes(let bytes): self = String(decoding: bytes, as: UTF8.self)
        default: throw SQLDecodingError.mismatch(sqlValue, String.self)
        }
    }
}

extension Array: SQLDecodable where Element == UInt8 {
    @inlinable
    public init(sqlValue: SQLValue) throws {
        switch sqlValue {
        case .bytes(let bytes): self = bytes
        case .text(let text): self = Array(text.utf8)
        default: throw SQLDecodingError.mismatch(sqlValue, [UInt8].self)
        }
    }
}

extension Data: SQLDecodable {
    @inlinable
    public init(sqlValue: SQLValue) throws { self = Data(try [UInt8](sqlValue: sqlValue)) }
}

extension Optional: SQLDecodable where Wrapped: SQLDecodable {
    @inlinable
    public init(sqlValue: SQLValue) throws {
        if case .null = sqlValue {
            self = .none
        } else {
            self = try Wrapped(sqlValue: sqlValue)
        }
    }
}
