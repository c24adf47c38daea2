import HeraldModel
import HeraldTestSupport
import Testing

@Suite("secure random bytes and ids", .watchedForStalls)
struct SecureRandomTests {
    @Test("bytes(n) gives n bytes (none for n ≤ 0, at most 4,096), and two draws differ")
    func counts() {
        for count in 0...20 { #expect(SecureRandom.bytes(count).count == count) }
        #expect(SecureRandom.bytes(-3).isEmpty)
        #expect(SecureRandom.bytes(1_000_000).count == 4096)
        #expect(SecureRandom.bytes(32) != SecureRandom.bytes(32))
    }

    @Test("base-32 ids: the length asked, RFC 4648's lower-case alphabet only, every character drawn")
    func base32() {
        let alphabet = Set("abcdefghijklmnopqrstuvwxyz234567")
        var seen = Set<Character>()
        var ids = Set<String>()
        for _ in 0..<200 {
            let id = SecureRandom.base32(24)
            #expect(id.count == 24)
            #expect(id.allSatisfy(alphabet.contains))
            seen.formUnion(id)
            ids.insert(id)
        }
        #expect(ids.count == 200)
        // 4,800 characters: each of the 32 is missing with probability (31/32)^4800, about 1e-66.
        #expect(seen == alphabet)
    }
}
