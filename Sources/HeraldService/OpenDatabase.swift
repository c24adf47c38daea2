public import GRDB
public import HeraldSQL
public import ServiceLifecycle

extension OpenedDatabase {
    /// What the process must run for it (PostgreSQL's pool; a SQLite file's disk-space gauge),
    /// listed before the listeners so that it stops after them.
    public var services: [any Service] {
        switch self {
        case .sqlite(let database): [DiskSpaceGauge.service(databasePath: database.path)]
        case .postgres(let database): [database]
        }
    }
}

extension ProcessContext {
    /// Opens this service's database (`database-url`); `sqlite` configures a SQLite file.
    public func openDatabase(sqlite configuration: Configuration = HeraldDatabase.configuration) throws
        -> OpenedDatabase
    {
        switch config.databaseURL {
        case .sqlite(let path): .sqlite(SQLiteDatabase(try DatabasePool(path: path, configuration: configuration)))
        case .postgres(let location): .postgres(try HeraldPostgres(location, logger: logger))
        }
    }
}
