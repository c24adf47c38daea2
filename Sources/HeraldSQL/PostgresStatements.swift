import Foundation
import PostgresNIO
import Synchronization

/// Which of the seam's statements a schema's pool prepares: each distinct text, with
/// the types of the values bound to it, under one name for every connection of the pool, prepared
/// on a connection the first time it runs there and only bound and run after that. Parsing and
/// planning a statement is the server's work per run without it.
///
/// Bounded: at most `capacity` texts are remembered, named or not (the stores' statements are a
/// few dozen; shapes of tag expressions add more), later ones run unprepared as before. Each named
/// text is a prepared statement on each connection that ran it, for the connection's life.
///
/// A statement whose preparation failed stays failed on that connection in postgres-nio (it
/// answers that error again without asking the server). So a server error other than a conflict,
/// a constraint or bad data moves its text to a new name, which the next run prepares afresh; a
/// text that has failed ``maximumGenerations`` times runs unprepared from then on.
final class PostgresStatements: Sendable {
    /// Fail-overs to a new name a text may take before it runs unprepared.
    static let maximumGenerations = 8

    let capacity: Int
    private let state = Mutex(State())

    private struct State {
        /// Every key seen, named or not: at most `capacity`.
        var entries: [String: Entry] = [:]
        /// Keys named so far (names are `herald_<number>`, then `herald_<number>_<generation>`).
        var count = 0
    }

    private enum Entry {
        case named(SeamStatement.Current, number: Int, generation: Int)
        case unprepared

        static func named(number: Int, generation: Int, sql: String) -> Entry {
            let name = generation == 0 ? "herald_\(number)" : "herald_\(number)_\(generation)"
            return .named(.init(name: name, sql: sql), number: number, generation: generation)
        }

        var statement: SeamStatement.Current? {
            guard case .named(let statement, _, _) = self else { return nil }
            return statement
        }
    }

    init(capacity: Int) { self.capacity = max(0, capacity) }

    /// The key of `text` run with `values`: a statement is prepared with its parameters' types, so
    /// the same text with a NULL where an integer was is another statement. `counting`: run for
    /// the number of rows it changes (``counting(_:)``), another statement again.
    static func key(_ text: String, _ values: [SQLValue], counting: Bool) -> String {
        var key = text
        key.reserveCapacity(text.utf8.count + values.count + 2)
        key.append(counting ? "\u{2}" : "\u{1}")
        for value in values {
            switch value {
            case .null: key.append("n")
            case .integer: key.append("i")
            case .text: key.append("t")
            case .bytes: key.append("b")
            case .bool: key.append("o")
            case .integers: key.append("I")
            case .texts: key.append("T")
            case .bools: key.append("O")
            case .byteStrings: key.append("B")
            }
        }
        return key
    }

    /// The name and text `key` (of `text`) is prepared as, or nil to run it unprepared: past the
    /// capacity, after too many failures, or when it is `counting` and ``counting(_:)`` cannot
    /// say what it changes.
    func statement(_ key: String, text: String, counting: Bool) -> SeamStatement.Current? {
        guard capacity > 0 else { return nil }
        return state.withLock { state in
            if let entry = state.entries[key] { return entry.statement }
            guard state.entries.count < capacity else { return nil }
            guard let sql = counting ? Self.counting(text) : text else {
                state.entries[key] = .unprepared
                return nil
            }
            state.count += 1
            let entry = Entry.named(number: state.count, generation: 0, sql: sql)
            state.entries[key] = entry
            return entry.statement
        }
    }

    /// `error` came from running `key` prepared as `name`: if it may be a failed preparation,
    /// `key` moves to a new name (or to running unprepared).
    func failed(_ key: String, name: String, _ error: any Error) {
        guard let error = error as? PSQLError, let code = error.serverInfo?[.sqlState] else { return }
        // A conflict, a constraint or bad data is the run's, never the preparation's.
        guard !["40", "23", "22"].contains(where: code.hasPrefix) else { return }
        state.withLock { state in
            guard case .named(let statement, let number, let generation) = state.entries[key],
                statement.name == name
            else { return }
            state.entries[key] =
                generation + 1 < Self.maximumGenerations
                ? .named(number: number, generation: generation + 1, sql: statement.sql) : .unprepared
        }
    }

    /// An INSERT, UPDATE or DELETE without RETURNING of its own, as a query of how many rows it
    /// changed (what its command tag says): `WITH c AS (… RETURNING 1) SELECT count(*) FROM c`.
    /// Any other statement: nil (it runs unprepared). postgres-nio reads a prepared statement's
    /// command tag only once its rows are consumed, and traps otherwise (1.33: `commandTag may
    /// only be called if all rows have been consumed`), so the count is read as a row instead.
    static func counting(_ text: String) -> String? {
        let verb = text.split(maxSplits: 1, whereSeparator: \.isWhitespace).first?.uppercased()
        guard let verb, ["INSERT", "UPDATE", "DELETE"].contains(verb),
            text.range(of: "RETURNING", options: .caseInsensitive) == nil
        else { return nil }
        return "WITH herald_changed AS (\(text) RETURNING 1) SELECT count(*) FROM herald_changed"
    }

    /// The texts named so far (for tests and diagnostics).
    var named: Int { state.withLock { $0.count } }
}

/// The seam's statements as postgres-nio's prepared statements. postgres-nio prepares a statement
/// per connection under its type's `name` and `sql`, which it reads once, in the caller's task,
/// when it is asked to run one: those are this task-local, set around that call, so one type
/// serves every text the seam prepares (postgres-nio has no public way to prepare a text not known
/// at compile time on a pooled connection and keep it there).
struct SeamStatement: PostgresPreparedStatement {
    struct Current: Sendable {
        var name: String
        var sql: String
    }

    @TaskLocal static var current = Current(name: "", sql: "")

    static var name: String { current.name }
    static var sql: String { current.sql }

    typealias Row = PostgresRow
    let bindings: PostgresBindings

    func makeBindings() throws -> PostgresBindings { bindings }
    func decodeRow(_ row: PostgresRow) throws -> PostgresRow { row }
}
