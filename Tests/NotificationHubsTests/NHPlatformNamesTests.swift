import HeraldModel
import HeraldProto
import HeraldTestSupport
import NotificationHubs
import Testing

@Suite("NH platform names", .watchedForStalls)
struct NHPlatformNamesTests {
    @Test("each platform's three spellings lead back to it; the first two in any case, the third as spelled")
    func roundTrip() throws {
        for platform in [Platform.apns, .fcm, .wns, .browser] {
            let names = try #require(NHPlatformNames.of(platform))
            #expect(NHPlatformNames.installation(names.installation.uppercased()) == platform)
            #expect(NHPlatformNames.format(names.format.uppercased()) == platform)
            #expect(NHPlatformNames.description(names.description) == platform)
            #expect(NHPlatformNames.description(names.description.lowercased()) == nil)
        }
        #expect(NHPlatformNames.format("template") == nil)
        #expect(NHPlatformNames.installation("gcm") == nil)
        #expect(NHPlatformNames.of(.unspecified) == nil)
    }
}
