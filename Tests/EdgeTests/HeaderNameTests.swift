import HTTPTypes
import Testing

@testable import Edge

@Suite("header names")
struct HeaderNameTests {
    @Test("every header name the edge spells out is a token, so none falls back to the invalid name")
    func namesAreTokens() {
        let fallback = HTTPField.Name.named("not a token")
        #expect(fallback.canonicalName == HTTPField.Name.invalidName.lowercased())
        for name in HTTPField.Name.heraldNamed {
            #expect(name != fallback, "\(name.rawName)")
        }
        #expect(Set(HTTPField.Name.heraldNamed.map(\.canonicalName)).count == HTTPField.Name.heraldNamed.count)
    }
}
