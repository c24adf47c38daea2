import PayloadService
import HeraldService

await HeraldProcess.main(PayloadServer.definition)
