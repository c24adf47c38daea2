/// Rows given column by column, that a statement reads as the table `u`: the batch inserts and
/// updates a store writes once for both databases.
///
///     let source = SQLRowSource(count: targets.count)
///         .texts("registration_id", targets.map(\.registrationID))
///         .integers("platform", targets.map { Int64($0.platform.rawValue) })
///     try await session.execute(
///         """
///         INSERT INTO delivery (notification_id, registration_id, platform)
///         SELECT \(id), u.registration_id, u.platform FROM \(rows: source) \(SQLRowSource.inOrder)
///         """)
///
/// `u.ordinal` numbers the rows from 1, in order. SQLite runs the statement once per row, `u` being
/// `(SELECT ? AS registration_id, ? AS platform, ? AS ordinal)`: one cached statement, stepped in the
/// writer's own thread, which costs less there than compiling one large statement. PostgreSQL runs
/// it once per ``chunk`` rows, `u` being `unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS
/// u(registration_id, platform, ordinal)`: one round trip per chunk. A `RETURNING` statement answers the rows of every run, in run order.
public struct SQLRowSource: Sendable {
    /// Rows per PostgreSQL statement: a large batch goes in several statements of its transaction.
    public static let chunk = 5000

    /// After `FROM \(rows: …)` in an INSERT that must keep the rows' order (ids follow it):
    /// `ORDER BY u.ordinal` on PostgreSQL; nothing on SQLite, whose every run is one row (an
    /// ORDER BY there would open a sorter for each).
    public static let inOrder = SQLFragment(sqlite: "", postgres: "ORDER BY u.ordinal")

    public let count: Int
    private(set) var names: [String] = []
    private(set) var columns: [Column] = []

    /// The number of placeholders `u` has: one per column, and the ordinal.
    var width: Int { columns.count + 1 }

    enum Column: Sendable {
        case integers([Int64])
        case texts([String])
        case bools([Bool])
        case bytes([[UInt8]])

        var count: Int {
            switch self {
            case .integers(let values): values.count
            case .texts(let values): values.count
            case .bools(let values): values.count
            case .bytes(let values): values.count
            }
        }

        var postgresType: String {
            switch self {
            case .integers: "bigint[]"
            case .texts: "text[]"
            case .bools: "boolean[]"
            case .bytes: "bytea[]"
            }
        }

        func array(_ rows: Range<Int>) -> SQLValue {
            switch self {
            case .integers(let values): .integers(Array(values[rows]))
            case .texts(let values): .texts(Array(values[rows]))
            case .bools(let values): .bools(Array(values[rows]))
            case .bytes(let values): .byteStrings(Array(values[rows]))
            }
        }
    }

    public init(count: Int) { self.count = count }

    public func integers(_ name: String, _ values: [Int64]) -> SQLRowSource { adding(name, .integers(values)) }
    public func texts(_ name: String, _ values: [String]) -> SQLRowSource { adding(name, .texts(values)) }
    public func bools(_ name: String, _ values: [Bool]) -> SQLRowSource { adding(name, .bools(values)) }
    public func bytes(_ name: String, _ values: [[UInt8]]) -> SQLRowSource { adding(name, .bytes(values)) }

    private func adding(_ name: String, _ column: Column) -> SQLRowSource {
        // trap-ok: columns are built from one array of rows by Herald code.
        precondition(column.count == count, "column \(name) has \(column.count) values for \(count) rows")
        var copy = self
        copy.names.append(name)
        copy.columns.append(column)
        return copy
    }

    /// The text `u` stands for; its `?` are one row's columns and ordinal (SQLite, bound by
    /// `SQLiteCalls`) or ``arrays(_:)`` (PostgreSQL).
    func tableText(_ dialect: SQLDialect) -> String {
        switch dialect {
        case .sqlite:
            "(SELECT " + (names + ["ordinal"]).map { "? AS \($0)" }.joined(separator: ", ") + ") AS u"
        case .postgres:
            "unnest(" + columns.map { "?::\($0.postgresType)" }.joined(separator: ", ") + ") WITH ORDINALITY AS u("
                + (names + ["ordinal"]).joined(separator: ", ") + ")"
        }
    }

    /// PostgreSQL's ordinality counts from 1 in each chunk: `ORDER BY u.ordinal` orders within a run,
    /// and runs go in order.
    func arrays(_ rows: Range<Int>) -> [SQLValue] { columns.map { $0.array(rows) } }
}
