package org.rmqspark.interop;

import java.io.IOException;
import java.net.ServerSocket;
import java.nio.file.Path;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.config.FlushDiskType;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.stats.BrokerStatsManager;

/** Builds a real DefaultMessageStore rooted at a directory, with small file sizes. */
final class StoreFactory {
    static final int CQ_UNITS_PER_FILE = 1000;

    private StoreFactory() {
    }

    static MessageStoreConfig config(Path root, int segmentBytes, int cqFileBytes) throws IOException {
        MessageStoreConfig config = new MessageStoreConfig();
        config.setStorePathRootDir(root.toString());
        config.setStorePathCommitLog(root.resolve("commitlog").toString());
        config.setMappedFileSizeCommitLog(segmentBytes);
        config.setMappedFileSizeConsumeQueue(cqFileBytes);
        config.setFlushDiskType(FlushDiskType.SYNC_FLUSH);
        // Small index files (the default pre-allocates ~420 MB per file).
        config.setMaxHashSlotNum(1024);
        config.setMaxIndexNum(4096);
        // The HA service listens on a port even on a lone master: take a free one.
        config.setHaListenPort(freePort());
        return config;
    }

    static DefaultMessageStore open(MessageStoreConfig config) throws IOException {
        BrokerConfig brokerConfig = new BrokerConfig();
        brokerConfig.setBrokerName("rmq-interop");
        return new DefaultMessageStore(config, new BrokerStatsManager("rmq-interop", true),
            (topic, queueId, logicOffset, tagsCode, msgStoreTime, filterBitMap, properties) -> { },
            brokerConfig, new ConcurrentHashMap<>());
    }

    private static int freePort() throws IOException {
        try (ServerSocket socket = new ServerSocket(0)) {
            return socket.getLocalPort();
        }
    }
}
