import HeraldService
import PayloadService

await HeraldProcess.main(PayloadServer.definition)
