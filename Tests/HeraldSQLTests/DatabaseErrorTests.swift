import GRDB
import HeraldModel
import HeraldRPC
import HeraldTestSupport
import Testing

@Suite("database errors", .watchedForStalls)
struct DatabaseErrorTests {
    @Test("a full disk answers storage-full; any other SQLite error stays internal, detail in the log only")
    func sqliteFull() {
        #expect(ServiceError.from(DatabaseError(resultCode: .SQLITE_FULL)) == (.storageFull, true))
        let other = ServiceError.from(DatabaseError(resultCode: .SQLITE_CORRUPT, message: "secret detail"))
        #expect(other.error == ServiceError(.internal, "internal error"))
        #expect(other.expected == false)
    }
}
