import DispatchService
import HeraldService

await HeraldProcess.main(DispatchServer.definition)
