import Foundation
import HeraldModel
import Testing

/// Inputs that once broke a service (issue 12), at the unit that now refuses them: names.
@Suite("hardening: names")
struct NamesTests {
    @Test("ids and counts have one spelling: digits, no sign, no leading zero, within Int64")
    func strictIntegers() {
        #expect(Names.positiveInteger("120") == 120)
        #expect(Names.positiveInteger("9223372036854775807") == Int64.max)
        for bad in [
            "+120", "0120", "0", "-1", " 7", "7 ", "1e3", "", "9223372036854775808", "99999999999999999999", "１２",
            "0x10",
        ] {
            #expect(Names.positiveInteger(bad) == nil, "\(bad)")
        }
    }
}

@Suite("hub rights as they arrive from auth")
struct HubRightsTests {
    @Test("names type once: Manage brings Listen and Send, case does not matter, an unknown name grants nothing")
    func granted() {
        #expect(HubRights(granted: ["Manage"]) == .full)
        #expect(HubRights(granted: ["send"]) == .send)
        #expect(HubRights(granted: ["Listen", "Admin"]) == .listen)
        #expect(HubRights(granted: []).isEmpty)
        #expect(!HubRights(granted: ["Listen", "Send"]).contains(.manage))
        #expect(HubRights.full.names == ["Listen", "Manage", "Send"])
    }
}
