import Foundation
import GRDB
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import HeraldTestSupport
import RegistrationService
import Testing

/// Inputs that once broke a service, at the unit that now refuses them: registration.
@Suite("hardening: registration", .watchedForStalls)
struct RegistrationHardeningTests {
    @Test("WNS channels and Web Push endpoints with control characters or spaces are refused")
    func handleInjection() throws {
        let good = "https://db5.notify.windows.com/?token=abc"
        try RegistrationRules.validateHandle(good, platform: .wns)
        for bad in [
            "https://db5.notify.windows.com/\r\nX-Injected: 1", "https://db5.notify.windows.com/\nX: 1",
            "https://db5.notify.windows.com/ a", "https://db5.notify.windows.com/\u{0}",
            "https://db5.notify.windows.com/\t",
        ] {
            #expect(throws: ServiceError.self, "\(bad.debugDescription)") {
                try RegistrationRules.validateHandle(bad, platform: .wns)
            }
        }
        let key = Base64URL.encode([4] + [UInt8](repeating: 1, count: 64))
        let auth = Base64URL.encode([UInt8](repeating: 2, count: 16))
        let subscription =
            #"{"endpoint":"https://fcm.googleapis.com/fcm/send/x\r\nX-Injected: 1","keys":{"p256dh":"\#(key)","auth":"\#(auth)"}}"#
        #expect(throws: ServiceError.self) { try RegistrationRules.validateHandle(subscription, platform: .browser) }
    }
}
