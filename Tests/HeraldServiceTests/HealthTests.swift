import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import HeraldTestSupport
import Testing

@Suite("health conditions", .watchedForStalls)
struct HealthTests {
    @Test("SERVING exactly when every condition holds; draining is final")
    func conditions() {
        let health = HealthReporter()
        health.setCondition("listening", false)
        health.track(["herald.v1.PayloadService", ""])
        #expect(health.status(of: "") == .notServing)
        health.setCondition("listening", true)
        #expect(health.status(of: "") == .serving)
        #expect(health.status(of: "herald.v1.PayloadService") == .serving)
        #expect(health.setCondition("database", false) == nil)
        #expect(health.status(of: "") == .notServing)
        #expect(health.failingConditions == ["database"])
        #expect(health.setCondition("database", true) == false)
        #expect(health.status(of: "") == .serving)
        health.beginDraining()
        #expect(health.status(of: "") == .notServing)
        health.setCondition("database", true)
        health.setCondition("listening", true)
        #expect(health.status(of: "herald.v1.PayloadService") == .notServing)
        #expect(health.status(of: "unknown") == nil)
    }
}
