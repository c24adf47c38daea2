import Edge
import HeraldService

await HeraldProcess.main(EdgeServer.definition)
