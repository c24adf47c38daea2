import Foundation
import HeraldModel
import HeraldProto
import HeraldTestSupport
import Testing

/// Inputs that once broke a service, at the unit that now refuses them: names.
@Suite("hardening: names", .watchedForStalls)
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

@Suite("hub rights as they arrive from auth", .watchedForStalls)
struct HubRightsTests {
    @Test(
        "typed once: Manage brings Listen and Send, an unknown right grants nothing and is refused when asked for, names parse in any case"
    )
    func granted() throws {
        #expect(HubRights([.manage]) == .full)
        #expect(HubRights([.send]) == .send)
        #expect(HubRights([.listen, .unrecognized(9), .unspecified]) == .listen)
        #expect(HubRights([]).isEmpty)
        #expect(!HubRights([.listen, .send]).contains(.manage))
        #expect(HubRights.full.names == ["Listen", "Manage", "Send"])
        #expect(HubRights.full.proto == [.listen, .manage, .send])
        #expect(HubRights(HubRights.send.proto) == .send)
        #expect(throws: ServiceError.self) { try HubRights(requested: [.send, .unrecognized(9)]) }
        #expect(throws: ServiceError.self) { try HubRights(requested: [.unspecified]) }
        #expect(try HubRights(requested: [.manage]) == .full)
        #expect(try HubRights(names: ["send", "LISTEN"]) == [.send, .listen])
        #expect(throws: ServiceError.self) { try HubRights(names: ["Admin"]) }
    }

    @Test(
        "a rolling upgrade: rights are written typed and as names; a peer of the release before, sending names only, is understood"
    )
    func olderPeers() throws {
        var answer = AuthorizeSasResponse(keyName: "k")
        answer.hubRights = [.listen, .send]
        #expect(answer.rights == [.listen, .send] && answer.legacyRights == ["Listen", "Send"])
        // What an older herald-auth answers, and what an older edge or CLI asks.
        #expect(AuthenticateResponse(user: "u", legacyRights: ["Manage"]).hubRights == .full)
        #expect(AuthenticateResponse(user: "u", legacyRights: ["Listen", "Admin"]).hubRights == .listen)
        #expect(try SetHubKeyRequest(legacyRights: ["send"]).requestedRights() == .send)
        #expect(throws: ServiceError.self) { try GrantHubRightsRequest(legacyRights: ["Admin"]).requestedRights() }
        // The typed field wins when both are there.
        #expect(HubKey(legacyRights: ["Manage"], rights: [.listen]).hubRights == .listen)
        #expect(try GrantHubRightsRequest().requestedRights().isEmpty)
    }
}
