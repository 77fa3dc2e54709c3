// A do-nothing Spark DataSource V2 source on the JVM: the spike of issue 32 item 6.
//
// bench/spark.py compiles it (javac against pyspark's own jars) and reads it beside the
// replog source and the do-nothing Python source (bench/spark_floor.py) in the same runs.
// It serves the same rows (Spark's Kafka schema, `records` rows of `valueBytes` bytes in
// `partitions` partitions) from memory, as a batch and as a micro-batch stream that supports
// Trigger.AvailableNow. What its stream costs beyond its batch read is Spark's fixed cost per
// streaming query for a JVM source: the cost a JVM stream reader for replog would pay instead
// of the Python stream-reader process Spark starts per query.
package replog.bench;

import java.util.HashSet;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.unsafe.types.UTF8String;

public class FloorSource implements TableProvider {
  static final StructType SCHEMA =
      new StructType()
          .add("key", DataTypes.BinaryType)
          .add("value", DataTypes.BinaryType)
          .add("topic", DataTypes.StringType)
          .add("partition", DataTypes.IntegerType)
          .add("offset", DataTypes.LongType)
          .add("timestamp", DataTypes.TimestampType)
          .add("timestampType", DataTypes.IntegerType);

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return SCHEMA;
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> props) {
    return new FloorTable();
  }

  static final class FloorTable implements SupportsRead {
    public String name() {
      return "jvm_floor";
    }

    public StructType schema() {
      return SCHEMA;
    }

    public Set<TableCapability> capabilities() {
      Set<TableCapability> caps = new HashSet<>();
      caps.add(TableCapability.BATCH_READ);
      caps.add(TableCapability.MICRO_BATCH_READ);
      return caps;
    }

    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      long records = Long.parseLong(options.getOrDefault("records", "1000000"));
      int partitions = Integer.parseInt(options.getOrDefault("partitions", "2"));
      int valueBytes = Integer.parseInt(options.getOrDefault("valueBytes", "100"));
      return () -> new FloorScan(records, partitions, valueBytes);
    }
  }

  static final class FloorOffset extends Offset {
    final long rows;

    FloorOffset(long rows) {
      this.rows = rows;
    }

    public String json() {
      return Long.toString(rows);
    }
  }

  static final class FloorPartition implements InputPartition {
    final int index;
    final long first;
    final long end;
    final int valueBytes;

    FloorPartition(int index, long first, long end, int valueBytes) {
      this.index = index;
      this.first = first;
      this.end = end;
      this.valueBytes = valueBytes;
    }
  }

  static final class FloorScan implements Scan, Batch, MicroBatchStream, SupportsTriggerAvailableNow {
    final long records;
    final int partitions;
    final int valueBytes;

    FloorScan(long records, int partitions, int valueBytes) {
      this.records = records;
      this.partitions = partitions;
      this.valueBytes = valueBytes;
    }

    public StructType readSchema() {
      return SCHEMA;
    }

    public Batch toBatch() {
      return this;
    }

    public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
      return this;
    }

    public InputPartition[] planInputPartitions() {
      return plan(0, records);
    }

    public InputPartition[] planInputPartitions(Offset start, Offset end) {
      return plan(((FloorOffset) start).rows, ((FloorOffset) end).rows);
    }

    InputPartition[] plan(long begin, long end) {
      long per = (end - begin + partitions - 1) / partitions;
      int count = per == 0 ? 0 : (int) ((end - begin + per - 1) / per);
      InputPartition[] parts = new InputPartition[count];
      for (int i = 0; i < count; i++) {
        parts[i] = new FloorPartition(i, begin + i * per, Math.min(end, begin + (i + 1) * per), valueBytes);
      }
      return parts;
    }

    public PartitionReaderFactory createReaderFactory() {
      return partition -> new FloorReader((FloorPartition) partition);
    }

    public Offset initialOffset() {
      return new FloorOffset(0);
    }

    public Offset latestOffset() {
      return new FloorOffset(records);
    }

    public Offset latestOffset(Offset start, ReadLimit limit) {
      return new FloorOffset(records);
    }

    public ReadLimit getDefaultReadLimit() {
      return ReadLimit.allAvailable();
    }

    public void prepareForTriggerAvailableNow() {}

    public Offset deserializeOffset(String json) {
      return new FloorOffset(Long.parseLong(json.trim()));
    }

    public void commit(Offset end) {}

    public void stop() {}
  }

  static final class FloorReader implements PartitionReader<InternalRow> {
    static final UTF8String TOPIC = UTF8String.fromString("floor");
    final FloorPartition part;
    final byte[] value;
    long next;

    FloorReader(FloorPartition part) {
      this.part = part;
      this.value = new byte[part.valueBytes];
      new Random(part.index).nextBytes(value);
      this.next = part.first - 1;
    }

    public boolean next() {
      next++;
      return next < part.end;
    }

    public InternalRow get() {
      return new GenericInternalRow(new Object[] {null, value, TOPIC, part.index, next, null, null});
    }

    public void close() {}
  }
}
