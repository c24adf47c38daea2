import GRDB
import GRDBSQLite
import HeraldModel

/// Runs one ``SQLQuery`` on GRDB's connection through SQLite's own calls: the statement comes
/// from GRDB's cache (compiled once), its values are bound with `sqlite3_bind_*` and its rows read
/// with `sqlite3_column_*`, straight from and into ``SQLValue``s.
///
/// Why not GRDB's `execute(arguments:)` and `Row` cursors, which this replaces: each value went
/// through `StatementArguments` (an array of existentials, checked and converted again) and each
/// row through a copied `Row` of `DatabaseValue`s before becoming an ``SQLRow``. On dispatch's hot
/// path (an outbox row per device at Send, a claim, a result and an inbox row per delivery) that
/// cost about a fifth of the throughput (herald-bench fanout: 52k against 70k deliveries/s to
/// the inbox). A statement over rows (``SQLRowSource``) binds its other values once and only the
/// row's columns per row, and is stepped and reset per row.
///
/// Errors are GRDB's `DatabaseError`, with SQLite's result code (so a full disk still reads as
/// ``ServiceError/storageFull``).
enum SQLiteCalls {
    static func run(_ db: Database, _ sql: SQLQuery, answering: Bool) throws -> (rows: [SQLRow], changes: Int) {
        let (text, head, tail, source) = sql.sqliteStatement()
        let statement = try db.cachedStatement(sql: text)
        let handle = statement.sqliteStatement
        let connection = db.sqliteConnection
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
        var index: Int32 = 1
        for value in head {
            try bind(value, at: index, handle, db, text)
            index += 1
        }
        let rowsAt = index
        index += Int32(source?.width ?? 0)
        for value in tail {
            try bind(value, at: index, handle, db, text)
            index += 1
        }
        var rows: [SQLRow] = []
        var changes = 0
        func step() throws {
            defer { sqlite3_reset(handle) }
            while true {
                let code = sqlite3_step(handle)
                if code == SQLITE_DONE { break }
                guard code == SQLITE_ROW else { throw error(code, connection, text) }
                if answering { rows.append(row(handle)) }
            }
            changes += Int(sqlite3_changes(connection))
        }
        guard let source else {
            try step()
            return (rows, changes)
        }
        for row in 0..<source.count {
            // Straight from the columns: no array of values per row.
            var index = rowsAt
            for column in source.columns {
                let code: Int32
                switch column {
                case .integers(let values): code = sqlite3_bind_int64(handle, index, values[row])
                case .bools(let values): code = sqlite3_bind_int64(handle, index, values[row] ? 1 : 0)
                case .texts(let values):
                    var string = values[row]
                    code = bindText(&string, index, handle)
                case .bytes(let values): code = bindBlob(values[row], index, handle)
                }
                guard code == SQLITE_OK else { throw error(code, connection, text) }
                index += 1
            }
            let code = sqlite3_bind_int64(handle, index, Int64(row + 1))
            guard code == SQLITE_OK else { throw error(code, connection, text) }
            try step()
        }
        return (rows, changes)
    }

    /// SQLite copies what it is given (`SQLITE_TRANSIENT`): the Swift value need not outlive the call.
    private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

    private static func bind(
        _ value: SQLValue, at index: Int32, _ handle: OpaquePointer, _ db: Database, _ text: String
    ) throws {
        let code: Int32
        switch value {
        case .null: code = sqlite3_bind_null(handle, index)
        case .integer(let integer): code = sqlite3_bind_int64(handle, index, integer)
        case .bool(let bool): code = sqlite3_bind_int64(handle, index, bool ? 1 : 0)
        case .text(var string): code = bindText(&string, index, handle)
        case .bytes(let bytes): code = bindBlob(bytes, index, handle)
        // A list (`anyOf:`) is read back with json_each.
        case .integers(let integers):
            var json = jsonArray(integers.lazy.map { String($0) })
            code = bindText(&json, index, handle)
        case .texts(let texts):
            var json = jsonArray(texts.lazy.map(jsonStringLiteral))
            code = bindText(&json, index, handle)
        case .bools(let bools):
            var json = jsonArray(bools.lazy.map { $0 ? "1" : "0" })
            code = bindText(&json, index, handle)
        // trap-ok: the SQLite session binds byte rows one by one before reaching here.
        case .byteStrings: preconditionFailure("SQLite binds a row source's bytes row by row")
        }
        guard code == SQLITE_OK else { throw error(code, db.sqliteConnection, text) }
    }

    private static func jsonArray(_ elements: some Sequence<String>) -> String {
        "[" + elements.joined(separator: ",") + "]"
    }

    private static func bindBlob(_ bytes: [UInt8], _ index: Int32, _ handle: OpaquePointer) -> Int32 {
        bytes.withUnsafeBytes { buffer in
            // An empty blob from a null pointer would be bound as NULL.
            guard let base = buffer.baseAddress, !buffer.isEmpty else { return sqlite3_bind_zeroblob(handle, index, 0) }
            return sqlite3_bind_blob(handle, index, base, Int32(buffer.count), transient)
        }
    }

    private static func bindText(_ string: inout String, _ index: Int32, _ handle: OpaquePointer) -> Int32 {
        string.withUTF8 { buffer in
            // An empty text from a null pointer would be bound as NULL.
            guard let base = buffer.baseAddress, !buffer.isEmpty else {
                return sqlite3_bind_text(handle, index, "", 0, transient)
            }
            return base.withMemoryRebound(to: CChar.self, capacity: buffer.count) {
                sqlite3_bind_text(handle, index, $0, Int32(buffer.count), transient)
            }
        }
    }

    private static func row(_ handle: OpaquePointer) -> SQLRow {
        let count = sqlite3_column_count(handle)
        var values: [SQLValue] = []
        values.reserveCapacity(Int(count))
        for column in 0..<count {
            switch sqlite3_column_type(handle, column) {
            case SQLITE_INTEGER: values.append(.integer(sqlite3_column_int64(handle, column)))
            case SQLITE_FLOAT:
                let double = sqlite3_column_double(handle, column)
                values.append(Int64(exactly: double).map(SQLValue.integer) ?? .text("\(double)"))
            case SQLITE_TEXT:
                let length = Int(sqlite3_column_bytes(handle, column))
                let text = sqlite3_column_text(handle, column).map {
                    String(decoding: UnsafeBufferPointer(start: $0, count: length), as: UTF8.self)
                }
                values.append(.text(text ?? ""))
            case SQLITE_BLOB:
                let length = Int(sqlite3_column_bytes(handle, column))
                let bytes = sqlite3_column_blob(handle, column).map {
                    [UInt8](UnsafeRawBufferPointer(start: $0, count: length))
                }
                values.append(.bytes(bytes ?? []))
            default: values.append(.null)
            }
        }
        return SQLRow(values)
    }

    private static func error(_ code: Int32, _ connection: OpaquePointer?, _ text: String) -> DatabaseError {
        DatabaseError(
            resultCode: ResultCode(rawValue: code), message: connection.map { String(cString: sqlite3_errmsg($0)) },
            sql: text)
    }
}
