package org.queueadmin.spark;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.parquet.HadoopReadOptions;
import org.apache.parquet.hadoop.Footer;
import org.apache.parquet.hadoop.ParquetFileReader;
import org.apache.parquet.hadoop.ParquetInputFormat;
import org.apache.parquet.hadoop.metadata.BlockMetaData;
import org.apache.parquet.hadoop.metadata.ParquetMetadata;
import org.apache.parquet.hadoop.util.HadoopInputFile;

import org.apache.spark.SparkContext;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.execution.datasources.DataSourceUtils;
import org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat;
import org.apache.spark.sql.execution.datasources.parquet.ParquetReadSupport;
import org.apache.spark.sql.execution.datasources.parquet.ParquetToSparkSchemaConverter;
import org.apache.spark.sql.execution.datasources.parquet.ParquetUtils;
import org.apache.spark.sql.execution.datasources.parquet.ParquetWriteSupport;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.SerializableConfiguration;

import org.queueadmin.spark.Slices.Options;
import org.queueadmin.spark.Slices.Slice;

/**
 * The scan of one read, on the driver: keeps the columns Spark asks for, reads each Parquet
 * file's footer (once, and kept for later reads of the file: {@link Footers}) to turn
 * row-group slices into byte ranges, cuts big slices into partitions,
 * and ships the session's Hadoop configuration to the executors (a broadcast, as Spark's own
 * file sources do), so that the readers see the same settings as spark.read.parquet/text.
 *
 * <p>Row groups to bytes: parquet-mr's range filter (HadoopReadOptions.withRange, applied when
 * VectorizedParquetRecordReader reads the footer for a FileSplit) keeps the row groups whose
 * midpoint, first byte + compressed size / 2, falls in [start, start + length). A row group's
 * midpoint lies inside its own bytes, so the range from the first byte of row group `a`
 * (BlockMetaData.getStartingPos) to the first byte of row group `b` (or the end of the file)
 * holds the midpoints of exactly the row groups [a, b), whatever the rounding. Each partition
 * also carries its row count, which the reader checks at its end.
 */
final class SliceScan implements SupportsPushDownRequiredColumns, Scan, Batch {

  private final Options options;
  private StructType readSchema;

  SliceScan(Options options, StructType schema) {
    this.options = options;
    this.readSchema = schema;
  }

  // -- ScanBuilder ------------------------------------------------------------------------

  @Override
  public void pruneColumns(StructType requiredSchema) {
    readSchema = requiredSchema;
  }

  @Override
  public Scan build() {
    if (options.parquet) {
      // Only the vectorized reader is used (it reads whole batches straight into columns):
      // a column it cannot read fails here, by name, rather than deep in a task.
      SQLConf sql = SQLConf.get();
      for (StructField field : readSchema.fields()) {
        if (!ParquetUtils.isBatchReadSupported(sql, field.dataType())) {
          throw new IllegalArgumentException("Slices: column `" + field.name() + "` ("
              + field.dataType().simpleString() + ") cannot be read by Spark's vectorized "
              + "Parquet reader; select the other columns, or read this input with "
              + "spark.read.parquet");
        }
      }
    }
    return this;
  }

  // -- Scan -------------------------------------------------------------------------------

  @Override
  public StructType readSchema() {
    return readSchema;
  }

  @Override
  public String description() {
    return "Slices " + (options.parquet ? "parquet" : "text") + " (" + options.slices.size()
        + " slices, first: " + options.slices.get(0).describe(options.parquet) + ")";
  }

  @Override
  public Batch toBatch() {
    return this;
  }

  // -- Batch ------------------------------------------------------------------------------

  @Override
  public InputPartition[] planInputPartitions() {
    Configuration conf = driverHadoopConf(SQLConf.get());
    List<SlicePartition> parts = new ArrayList<>();
    Map<Path, ParquetMetadata> footers = new HashMap<>();
    long target = options.partitionBytes;
    if (options.partitions > 0) { // the whole read's bytes over the partitions asked for
      long total = 0;
      for (Slice slice : options.slices) {
        try {
          total += options.parquet ? groupBytes(slice, conf, footers)
              : Math.max(0, slice.to() - slice.from());
        } catch (IOException e) {
          break; // planned below, which says what is wrong with the slice
        }
      }
      target = Math.max(1, ceilDiv(total, options.partitions));
    }
    for (Slice slice : options.slices) {
      try {
        if (options.parquet) {
          planParquet(slice, conf, footers, parts, target);
        } else {
          planText(slice, conf, parts, target);
        }
      } catch (FileNotFoundException e) {
        throw new IllegalArgumentException("Slices: cannot read "
            + slice.describe(options.parquet) + ": file not found", e);
      } catch (IOException e) {
        throw new IllegalArgumentException("Slices: cannot read "
            + slice.describe(options.parquet) + ": " + e, e);
      }
    }
    return parts.toArray(new InputPartition[0]);
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    SQLConf sql = SQLConf.get();
    Configuration conf = driverHadoopConf(sql);
    if (options.parquet) {
      // What ParquetFileFormat / ParquetScan set for their readers: the read support that
      // clips the file schema to the requested columns, and the flags the executors'
      // ParquetToSparkSchemaConverter(Configuration) needs (it fails without them).
      conf.set(ParquetInputFormat.READ_SUPPORT_CLASS, ParquetReadSupport.class.getName());
      conf.set(ParquetReadSupport.SPARK_ROW_REQUESTED_SCHEMA(), readSchema.json());
      conf.set(ParquetWriteSupport.SPARK_ROW_SCHEMA(), readSchema.json());
      conf.set(SQLConf.SESSION_LOCAL_TIMEZONE().key(), sql.sessionLocalTimeZone());
      conf.setBoolean(SQLConf.NESTED_SCHEMA_PRUNING_ENABLED().key(),
          sql.nestedSchemaPruningEnabled());
      conf.setBoolean(SQLConf.CASE_SENSITIVE().key(), sql.caseSensitiveAnalysis());
      conf.setBoolean(SQLConf.PARQUET_BINARY_AS_STRING().key(), sql.isParquetBinaryAsString());
      conf.setBoolean(SQLConf.PARQUET_INT96_AS_TIMESTAMP().key(),
          sql.isParquetINT96AsTimestamp());
      conf.setBoolean(SQLConf.PARQUET_INFER_TIMESTAMP_NTZ_ENABLED().key(),
          sql.parquetInferTimestampNTZEnabled());
      conf.setBoolean(SQLConf.LEGACY_PARQUET_NANOS_AS_LONG().key(),
          sql.legacyParquetNanosAsLong());
    }
    Broadcast<SerializableConfiguration> shared = JavaSparkContext
        .fromSparkContext(SparkContext.getOrCreate())
        .broadcast(new SerializableConfiguration(conf));
    if (options.parquet) {
      return new ParquetSliceReader(shared, sql.offHeapColumnVectorEnabled(),
          sql.parquetVectorizedReaderBatchSize());
    }
    return new TextSliceReader(shared, readSchema.isEmpty());
  }

  // -- planning ---------------------------------------------------------------------------

  /** The compressed bytes of a Parquet slice's row groups (0 for a slice out of range). */
  private static long groupBytes(Slice slice, Configuration conf,
      Map<Path, ParquetMetadata> footers) throws IOException {
    List<BlockMetaData> groups = footerOf(new Path(slice.path()), conf, footers).getBlocks();
    long bytes = 0;
    for (long g = Math.max(0, slice.from()); g < Math.min(groups.size(), slice.to()); g++) {
      bytes += groups.get((int) g).getCompressedSize();
    }
    return bytes;
  }

  private static ParquetMetadata footerOf(Path path, Configuration conf,
      Map<Path, ParquetMetadata> footers) throws IOException {
    ParquetMetadata footer = footers.get(path);
    if (footer == null) {
      footer = Footers.of(path, conf);
      footers.put(path, footer);
    }
    return footer;
  }

  private void planParquet(Slice slice, Configuration conf, Map<Path, ParquetMetadata> footers,
      List<SlicePartition> parts, long target) throws IOException {
    Path path = new Path(slice.path());
    FileSystem fs = path.getFileSystem(conf);
    FileStatus status = fs.getFileStatus(path); // FileNotFoundException for a missing file
    ParquetMetadata footer = footerOf(path, conf, footers);
    List<BlockMetaData> groups = footer.getBlocks();
    if (slice.from() < 0 || slice.to() > groups.size() || slice.from() > slice.to()) {
      throw new IllegalArgumentException("Slices: " + slice.describe(true)
          + " is out of range: the file has " + groups.size() + " row groups [0, "
          + groups.size() + ")");
    }
    int first = (int) slice.from();
    int end = (int) slice.to();
    SlicePartition.Rebase rebase = rebase(footer);
    String file = status.getPath().toString();
    long[] sizes = new long[end - first];
    for (int g = first; g < end; g++) {
      sizes[g - first] = groups.get(g).getCompressedSize();
    }
    int from = first;
    for (int cut : cuts(sizes, target)) {
      int to = first + cut;
      long start = groups.get(from).getStartingPos();
      long stop = to < groups.size() ? groups.get(to).getStartingPos() : status.getLen();
      long rows = 0;
      for (int g = from; g < to; g++) {
        rows += groups.get(g).getRowCount();
      }
      String what = "row groups [" + from + ", " + to + ") of " + file;
      parts.add(new SlicePartition(file, start, stop - start, what, rows, false, rebase));
      from = to;
    }
  }

  private void planText(Slice slice, Configuration conf, List<SlicePartition> parts,
      long target) throws IOException {
    Path path = new Path(slice.path());
    FileStatus status = path.getFileSystem(conf).getFileStatus(path);
    if (slice.from() < 0 || slice.from() > slice.to() || slice.to() > status.getLen()) {
      throw new IllegalArgumentException("Slices: " + slice.describe(false)
          + " is out of range: the file has " + status.getLen() + " bytes");
    }
    String file = status.getPath().toString();
    long length = slice.to() - slice.from();
    long n = Math.max(1, ceilDiv(length, target));
    long step = ceilDiv(length, n);
    for (long start = slice.from(); start < slice.to(); start += step) {
      long stop = Math.min(slice.to(), start + step);
      String what = "bytes [" + start + ", " + stop + ") of " + file;
      parts.add(new SlicePartition(file, start, stop - start, what, -1,
          options.skipHeader && start == 0, null));
    }
  }

  /**
   * Where to cut consecutive row groups of these compressed sizes into partitions of about
   * `target` bytes each, never inside a row group: n = ceil(total / target) partitions (at most
   * one per row group), partition k ending at the first row group that takes the running total
   * to k/n of the whole. Returns the end (exclusive, relative) of each partition.
   */
  static int[] cuts(long[] sizes, long target) {
    if (sizes.length == 0) {
      return new int[0];
    }
    long total = 0;
    for (long s : sizes) {
      total += s;
    }
    int n = (int) Math.min(sizes.length, Math.max(1, ceilDiv(total, target)));
    int[] ends = new int[n];
    long running = 0;
    int k = 0;
    for (int g = 0; g < sizes.length && k < n - 1; g++) {
      running += sizes[g];
      // Leave at least one row group for each partition still to come.
      if ((double) running * n >= (double) total * (k + 1) || sizes.length - (g + 1) == n - k - 1) {
        ends[k++] = g + 1;
      }
    }
    ends[n - 1] = sizes.length;
    return ends;
  }

  private SlicePartition.Rebase rebase(ParquetMetadata footer) {
    // As ParquetPartitionReaderFactory: the file's own metadata (writer, legacy flags) decides
    // first, then the option, then the session's mode.
    SQLConf sql = SQLConf.get();
    Map<String, String> meta = footer.getFileMetaData().getKeyValueMetaData();
    String dtMode = options.datetimeRebaseMode != null ? options.datetimeRebaseMode
        : String.valueOf(sql.getConf(SQLConf.PARQUET_REBASE_MODE_IN_READ()));
    String i96Mode = options.int96RebaseMode != null ? options.int96RebaseMode
        : String.valueOf(sql.getConf(SQLConf.PARQUET_INT96_REBASE_MODE_IN_READ()));
    var dt = DataSourceUtils.datetimeRebaseSpec(meta::get, dtMode);
    var i96 = DataSourceUtils.int96RebaseSpec(meta::get, i96Mode);
    // INT96 timestamps are shifted to the session's zone only for files not written by
    // parquet-mr, when spark.sql.parquet.int96TimestampConversion is on.
    String createdBy = footer.getFileMetaData().getCreatedBy();
    String convertTz = sql.isParquetINT96TimestampConversion()
        && (createdBy == null || !createdBy.startsWith("parquet-mr"))
        ? sql.sessionLocalTimeZone() : null;
    return new SlicePartition.Rebase(dt.mode().toString(), dt.timeZone(), i96.mode().toString(),
        i96.timeZone(), convertTz);
  }

  // -- shared with Slices (schema inference) ----------------------------------------------

  /**
   * The session's Hadoop configuration, as SessionState.newHadoopConf builds it: the
   * SparkContext's, with every SQL setting of the session over it.
   */
  static Configuration driverHadoopConf(SQLConf sql) {
    Configuration conf = new Configuration(SparkContext.getOrCreate().hadoopConfiguration());
    scala.jdk.javaapi.CollectionConverters.asJava(sql.getAllConfs()).forEach((k, v) -> {
      if (v != null) {
        conf.set(k, v);
      }
    });
    return conf;
  }

  /** The schema spark.read.parquet gives this slice's file (its footer, with Spark's rules). */
  static StructType parquetSchema(Slice slice, Configuration conf, SQLConf sql)
      throws IOException {
    Path path = new Path(slice.path());
    ParquetMetadata footer = Footers.of(path, conf);
    return ParquetFileFormat.readSchemaFromFooter(new Footer(path, footer),
        new ParquetToSparkSchemaConverter(sql));
  }

  /** The whole footer (every row group's metadata). */
  static ParquetMetadata readFooter(Path path, Configuration conf) throws IOException {
    try (ParquetFileReader reader = ParquetFileReader.open(HadoopInputFile.fromPath(path, conf),
        HadoopReadOptions.builder(conf, path).build())) {
      return reader.getFooter();
    }
  }

  private static long ceilDiv(long a, long b) {
    return -Math.floorDiv(-a, b);
  }
}
