package org.queueadmin.spark;

import java.io.IOException;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapred.FileSplit;
import org.apache.hadoop.mapreduce.TaskAttemptID;
import org.apache.hadoop.mapreduce.task.TaskAttemptContextImpl;

import org.apache.spark.TaskContext;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.DateTimeUtils;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.execution.datasources.parquet.VectorizedParquetRecordReader;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.util.SerializableConfiguration;

/**
 * Reads a Parquet partition with Spark's VectorizedParquetRecordReader, built and initialised as
 * ParquetPartitionReaderFactory / ParquetFileFormat do in Spark 4.x: rebase modes from the
 * driver, off-heap vectors when the session asks for them, the session's batch size, columnar
 * batches out. The FileSplit's byte range selects the row groups (parquet-mr's midpoint rule).
 */
final class ParquetSliceReader implements PartitionReaderFactory {
  private static final long serialVersionUID = 1L;

  private final Broadcast<SerializableConfiguration> conf;
  private final boolean offHeap;
  private final int batchSize;

  ParquetSliceReader(Broadcast<SerializableConfiguration> conf, boolean offHeap, int batchSize) {
    this.conf = conf;
    this.offHeap = offHeap;
    this.batchSize = batchSize;
  }

  @Override
  public boolean supportColumnarReads(InputPartition partition) {
    return true;
  }

  @Override
  public PartitionReader<InternalRow> createReader(InputPartition partition) {
    throw new UnsupportedOperationException("Slices: Parquet is read in columnar batches only");
  }

  @Override
  public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
    SlicePartition part = (SlicePartition) partition;
    SlicePartition.Rebase rebase = part.rebase;
    Configuration hadoopConf = conf.value().value();
    VectorizedParquetRecordReader reader = new VectorizedParquetRecordReader(
        rebase.convertTz() == null ? null : DateTimeUtils.getZoneId(rebase.convertTz()),
        rebase.datetimeMode(), rebase.datetimeTz(), rebase.int96Mode(), rebase.int96Tz(),
        offHeap && TaskContext.get() != null, batchSize);
    try {
      // SpecificParquetRecordReaderBase casts the split to the old API's FileSplit (mapred).
      FileSplit split = new FileSplit(new Path(part.path), part.start, part.length,
          new String[0]);
      reader.initialize(split, new TaskAttemptContextImpl(hadoopConf, new TaskAttemptID()));
      reader.initBatch(new StructType(), new GenericInternalRow(0)); // no partition columns
      reader.enableReturningBatches();
    } catch (IOException | InterruptedException | RuntimeException e) {
      closeQuietly(reader, e);
      throw new IllegalStateException("Slices: cannot read " + part.what + ": " + e, e);
    }
    return new BatchReader(reader, part);
  }

  private static void closeQuietly(VectorizedParquetRecordReader reader, Exception cause) {
    try {
      reader.close();
    } catch (IOException | RuntimeException e) {
      cause.addSuppressed(e);
    }
  }

  /** The reader's batches; at the end, a check that they held the row groups' rows. */
  private static final class BatchReader implements PartitionReader<ColumnarBatch> {
    private final VectorizedParquetRecordReader reader;
    private final SlicePartition part;
    private long rows;

    BatchReader(VectorizedParquetRecordReader reader, SlicePartition part) {
      this.reader = reader;
      this.part = part;
    }

    @Override
    public boolean next() throws IOException {
      if (reader.nextKeyValue()) {
        rows += ((ColumnarBatch) reader.getCurrentValue()).numRows();
        return true;
      }
      if (rows != part.rows) {
        throw new IllegalStateException("Slices: read " + rows + " rows from " + part.what
            + " but its row groups hold " + part.rows + " (bytes [" + part.start + ", "
            + (part.start + part.length) + ") did not select exactly these row groups)");
      }
      return false;
    }

    @Override
    public ColumnarBatch get() {
      return (ColumnarBatch) reader.getCurrentValue();
    }

    @Override
    public void close() throws IOException {
      reader.close();
    }
  }
}
