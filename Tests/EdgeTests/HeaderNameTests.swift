import HTTPTypes
import HeraldTestSupport
import Testing

@testable import Edge

@Suite("header names", .watchedForStalls)
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

    @Test(
        "a header read as the subscript reads it: one field as it is, several joined as HTTPTypes joins them, none nil")
    func valueAsSubscript() {
        var fields: HTTPFields = [.authorization: "Basic dTpw", .contentLength: "12"]
        fields.append(HTTPField(name: .accept, value: "text/plain"))
        fields.append(HTTPField(name: .accept, value: "application/json"))
        fields.append(HTTPField(name: .cookie, value: "a=1"))
        fields.append(HTTPField(name: .cookie, value: "b=2"))
        fields.append(HTTPField(name: HTTPField.Name("x-empty")!, value: ""))  // trap-ok: a test's literal token
        for name in [
            HTTPField.Name.authorization, .contentLength, .accept, .cookie, .requestID, HTTPField.Name("x-empty")!,
        ] {  // trap-ok: a test's literal token
            #expect(fields.value(name) == fields[name], "\(name)")
        }
        #expect(fields.value(.accept) == "text/plain, application/json")
        #expect(fields.value(.cookie) == "a=1; b=2")
        #expect(fields.value(.requestID) == nil)
    }

    @Test("a NUL anywhere in a text is found, and none in text without one")
    func nul() {
        #expect(!EdgeHTTP.containsNUL(""))
        #expect(!EdgeHTTP.containsNUL("apns"))
        #expect(EdgeHTTP.containsNUL("\u{0}"))
        #expect(EdgeHTTP.containsNUL(String(repeating: "a", count: 100) + "\u{0}"))
        #expect(EdgeHTTP.containsNUL("é\u{0}x"))
        // A bridged or non-contiguous string takes the other path: the same answers.
        let sub = Substring("ab\u{0}cd").dropFirst()
        #expect(EdgeHTTP.containsNUL(String(sub)))
    }
}
