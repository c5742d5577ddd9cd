// Whole-file reads and atomic writes: contents round-trip, a failed write
// leaves the old file and no staging file, and every error names the path
// the caller gave (never the staging file beside it). Files written
// together are all replaced or none. MadeDirs removes the
// directories it made, and only those, while they are empty.
#include "src/core/file_util.h"

#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ladder {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

class FileUtilTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / "file_util_test";
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(FileUtilTest, WritesAndReplacesWholeContents) {
  const std::string path = (dir_ / "f").string();
  ASSERT_TRUE(WriteFileAtomically(path, std::string("a\0b", 3)).ok());
  EXPECT_EQ(*ReadFile(path), std::string("a\0b", 3));
  ASSERT_TRUE(WriteFileAtomically(path, "new").ok());
  EXPECT_EQ(*ReadFile(path), "new");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST_F(FileUtilTest, MissingDirectoryNamesThePathAskedFor) {
  const std::string path = (dir_ / "no" / "f").string();
  absl::Status s = WriteFileAtomically(path, "x");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("'" + path + "'"));
  EXPECT_THAT(s.message(), Not(HasSubstr(".tmp")));
}

TEST_F(FileUtilTest, FailedReplaceKeepsTheOldEntryAndNoStagingFile) {
  // A non-empty directory at the path cannot be replaced by a file.
  const fs::path path = dir_ / "d";
  fs::create_directories(path / "inside");
  absl::Status s = WriteFileAtomically(path.string(), "x");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("'" + path.string() + "'"));
  EXPECT_THAT(s.message(), Not(HasSubstr(".tmp")));
  EXPECT_TRUE(fs::is_directory(path / "inside"));
  EXPECT_FALSE(fs::exists(path.string() + ".tmp"));
}

TEST_F(FileUtilTest, FilesThatBelongTogetherAreAllOldOrAllNew) {
  const std::string a = (dir_ / "a").string(), b = (dir_ / "b").string();
  ASSERT_TRUE(WriteFilesAtomically({{a, "old a"}, {b, "old b"}}).ok());
  EXPECT_EQ(*ReadFile(a), "old a");
  EXPECT_EQ(*ReadFile(b), "old b");
  // The third cannot be written (its directory is missing): the first two
  // keep their old contents, and nothing staged is left.
  const std::string c = (dir_ / "no" / "c").string();
  absl::Status s = WriteFilesAtomically({{a, "new a"}, {b, "new b"}, {c, "new c"}});
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("'" + c + "'"));
  EXPECT_EQ(*ReadFile(a), "old a");
  EXPECT_EQ(*ReadFile(b), "old b");
  for (const auto& e : fs::directory_iterator(dir_)) {
    EXPECT_NE(e.path().extension(), ".tmp") << e.path();
  }
  ASSERT_TRUE(WriteFilesAtomically({{a, "new a"}, {b, "new b"}}).ok());
  EXPECT_EQ(*ReadFile(a), "new a");
  EXPECT_EQ(*ReadFile(b), "new b");
}

TEST_F(FileUtilTest, MadeDirsRemovesWhatItMadeWhileEmpty) {
  // Made and left empty: gone, parents included, but not what was there.
  {
    MadeDirs made;
    ASSERT_TRUE(made.Create((dir_ / "a" / "b" / "c/").string()).ok());
    EXPECT_TRUE(fs::is_directory(dir_ / "a" / "b" / "c"));
  }
  EXPECT_FALSE(fs::exists(dir_ / "a"));
  EXPECT_TRUE(fs::is_directory(dir_));
  // Written into: kept, and so are its parents.
  {
    MadeDirs made;
    ASSERT_TRUE(made.Create((dir_ / "a" / "b").string()).ok());
    ASSERT_TRUE(WriteFileAtomically((dir_ / "a" / "b" / "f").string(), "x").ok());
  }
  EXPECT_TRUE(fs::exists(dir_ / "a" / "b" / "f"));
  // A directory that existed, empty: untouched.
  fs::create_directories(dir_ / "e");
  {
    MadeDirs made;
    ASSERT_TRUE(made.Create((dir_ / "e").string()).ok());
  }
  EXPECT_TRUE(fs::is_directory(dir_ / "e"));
  // Through a file: an error naming the directory asked for.
  ASSERT_TRUE(WriteFileAtomically((dir_ / "file").string(), "x").ok());
  MadeDirs made;
  absl::Status s = made.Create((dir_ / "file" / "sub").string());
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr((dir_ / "file" / "sub").string()));
}

TEST_F(FileUtilTest, ReadErrorsNameThePath) {
  EXPECT_EQ(ReadFile((dir_ / "absent").string()).status().code(), absl::StatusCode::kNotFound);
  absl::Status s = ReadFile(dir_.string()).status();
  EXPECT_THAT(s.message(), HasSubstr("is a directory"));
}

}  // namespace
}  // namespace ladder
